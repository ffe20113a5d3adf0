"""Limits on what an input or an option may ask of charllm-trace (issue 15: untrusted inputs).

Generous for real jobs, small enough that a hostile or mistyped value is refused with one line
instead of exhausting memory. Each reader or option parser that enforces one names it here.
"""

from __future__ import annotations

#: ranks are numbered below this (2**20, far beyond any job): bounds what ``--ranks`` may list
#: (``analyze``, ``collect``) before anything is built from it
MAX_RANK = 1 << 20


def parse_ranks(text: str | None) -> list[int] | None:
    """A ``--ranks`` value (``analyze``, ``collect``): ``"all"`` or nothing -> None;
    ``"0,8,16-18"`` -> [0, 8, 16, 17, 18] (sorted, each once). Ranks at or above
    :data:`MAX_RANK`, backward ranges and more than :data:`MAX_RANK` listed ranks are a
    ``UsageError`` (one line) before anything is built."""
    import re

    from charllm_trace.errors import UsageError

    t = (text or "").strip().lower()
    if t in ("", "all"):
        return None
    spans: list[tuple[int, int]] = []
    listed = 0
    for part in t.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise UsageError(f"--ranks {text!r}: expected a list like 0,8,16-18 or 'all'")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
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
