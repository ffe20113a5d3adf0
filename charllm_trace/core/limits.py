"""Limits on what an input or an option may ask of charllm-trace (issue 15: untrusted inputs).

Generous for real jobs, small enough that a hostile or mistyped value is refused with one line
instead of exhausting memory. Each reader or option parser that enforces one names it here.
"""

from __future__ import annotations

import re

#: ranks are numbered below this (2**20, far beyond any job): bounds what ``--ranks`` may list
#: (``analyze``, ``collect``) before anything is built from it
MAX_RANK = 1 << 20

#: telemetry rows one ET may declare (2**24: 20 Hz samples of 8 devices for 29 hours); the rows
#: of an all-null column are made from this count, so it is bounded before anything is allocated
MAX_TELEMETRY_ROWS = 1 << 24


def parse_span(text: str) -> tuple[int, int] | None:
    """``"A"`` or ``"A-B"`` (spaces allowed around the numbers) as (A, B), (A, A) for one number;
    None when the text is neither (a range that runs backwards is returned as it is)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    if not m:
        return None
    lo = int(m.group(1))
    return lo, int(m.group(2)) if m.group(2) is not None else lo


def parse_ranks(text: str | None) -> list[int] | None:
    """A ``--ranks`` value (``analyze``, ``collect``): ``"all"`` or nothing -> None;
    ``"0,8,16-18"`` -> [0, 8, 16, 17, 18] (sorted, each once). Ranks at or above
    :data:`MAX_RANK`, backward ranges and more than :data:`MAX_RANK` listed ranks are a
    ``UsageError`` (one line) before anything is built."""

    from charllm_trace.core.errors import UsageError

    t = (text or "").strip().lower()
    if t in ("", "all"):
        return None
    spans: list[tuple[int, int]] = []
    listed = 0
    for part in t.split(","):
        span = parse_span(part)
        if span is None:
            raise UsageError(f"--ranks {text!r}: expected a list like 0,8,16-18 or 'all'")
        lo, hi = span
        if hi < lo:
            raise UsageError(f"--ranks {text!r}: the range {part.strip()} runs backwards")
        if hi >= MAX_RANK:
            raise UsageError(
                f"--ranks {text!r}: rank {hi} is beyond the largest rank charllm-trace reads ({MAX_RANK - 1})"
            )
        listed += hi - lo + 1
        if listed > MAX_RANK:
            raise UsageError(f"--ranks {text!r}: more than {MAX_RANK} ranks listed")
        spans.append((lo, hi))
    return sorted({r for lo, hi in spans for r in range(lo, hi + 1)})


def parse_sample(value: int | None) -> int | None:
    """A ``--sample N`` value: None stays None; N must be at least 1 (``UsageError``, one line)."""
    from charllm_trace.core.errors import UsageError

    if value is None:
        return None
    if value < 1:
        raise UsageError(f"--sample {value}: expected a number of ranks, at least 1")
    return value


def sample_ranks(present: list[int], n: int) -> list[int]:
    """``--sample N``: N of the ``present`` ranks, evenly spaced over their sorted order and always
    the first and the last (N == 1: the first). Position i of N takes the rank at index
    ``round(i * (M - 1) / (N - 1))`` of the M present ranks, so the choice depends only on the
    ranks present and N (deterministic, no random seed). All of them when N >= M."""
    ranks = sorted(set(present))
    m = len(ranks)
    if n >= m:
        return ranks
    if n == 1:
        return ranks[:1]
    return sorted({ranks[(2 * i * (m - 1) + (n - 1)) // (2 * (n - 1))] for i in range(n)})


def choose_ranks(present: list[int], ranks: list[int] | None, sample: int | None) -> list[int] | None:
    """The ranks to read of those ``present``: ``ranks`` (``--ranks``; every one must be present,
    else ``InputError`` naming them), then ``sample`` of those (``--sample``); None: all."""
    if ranks is None and sample is None:
        return None
    from charllm_trace.core.errors import InputError

    have = set(present)
    if ranks is not None:
        missing = [r for r in ranks if r not in have]
        if missing:
            more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
            raise InputError(
                None, f"no rank {missing[:8]}{more} here (ranks present: {_ranges(sorted(have))})"
            )
    pool = sorted(have) if ranks is None else sorted(set(ranks))
    return sample_ranks(pool, sample) if sample is not None else pool


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the ``--ranks`` syntax)."""
    out: list[str] = []
    for r in ranks:
        if out and r == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out)


def env_int(name: str, default: int) -> int:
    import os

    from charllm_trace.core.errors import UsageError

    raw = os.environ.get(name, "").strip().replace("_", "")
    if not raw:
        return default
    try:
        value = int(float(raw)) if "e" in raw.lower() else int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a whole number") from None
    if value <= 0:
        raise UsageError(f"{name}={raw!r}: expected a number above 0")
    return value


#: the most bytes one input may hold once decompressed (``CHARLLM_TRACE_MAX_INPUT_BYTES``);
#: the largest real per-rank traces are a few GB of JSON
MAX_INPUT_BYTES = 64 << 30

#: the most a gzip input may expand, as a multiple of its compressed size
#: (``CHARLLM_TRACE_MAX_GZIP_RATIO``). Real traces expand 9-29x (the shared ones: see
#: docs/untrusted.md); gzip of repeated bytes reaches ~1,030x. Inputs under 256 MiB out are
#: never refused by this ratio.
MAX_GZIP_RATIO = 200
_RATIO_FLOOR = 256 << 20


def max_input_bytes() -> int:
    return env_int("CHARLLM_TRACE_MAX_INPUT_BYTES", MAX_INPUT_BYTES)


def gzip_out_limit(compressed_size: int) -> int:
    """The most bytes a gzip input of ``compressed_size`` bytes may decompress to."""
    ratio = env_int("CHARLLM_TRACE_MAX_GZIP_RATIO", MAX_GZIP_RATIO)
    return min(max_input_bytes(), max(_RATIO_FLOOR, ratio * compressed_size))
