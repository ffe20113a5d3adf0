"""Checks of a saved results file (``results_store``) beyond its checksums, made before anything
is drawn from it: a results zip comes from strangers too (issue 28).

- decoding its Arrow frames stays within the gzip limit of the file's size (a zstd frame of a
  389 KB zip declared 9.6 GB): the frames' own metadata is read first (``ipc_bounds``);
- every frame has the columns and types of its result (``analysis.frame_schemas``), so the
  renderers never meet a frame without ``rank`` or with strings for numbers;
- ranks (the analysis', the views') are integers in 0 .. ``limits.MAX_RANK``;
- the views' windows and times are finite integers of int64 nanoseconds.

Each failure is a message for an ``InputError`` naming the file.
"""

from __future__ import annotations

import zipfile
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from charllm_trace.analysis.results import RunAnalysis

_INT64 = (-(2**63), 2**63 - 1)
#: what reading a damaged results zip raises: zipfile's CRC and header errors (RuntimeError: an
#: encrypted member), a missing member, a malformed value, a manifest nested past the JSON parser's
#: depth, a number past what its field holds, polars on a frame that is not what it claims
READ_ERRORS = (
    zipfile.BadZipFile,
    KeyError,
    TypeError,
    ValueError,
    EOFError,
    NotImplementedError,
    RuntimeError,
    RecursionError,
    OverflowError,
    pl.exceptions.PolarsError,
)


def frames_bound(members: dict[str, bytes], limit: int) -> str | None:
    """Why the ``.arrow`` members may not be decoded (None: they may)."""
    from charllm_trace.core.ipc_bounds import NotIpc, decoded_bytes

    total = 0
    for name, data in members.items():
        if not name.endswith(".arrow"):
            continue
        try:
            total += decoded_bytes(data)
        except NotIpc as exc:
            return f"{name}: not an Arrow IPC file ({exc})"
        if total > limit:
            return f"its Arrow frames decode to more than {limit:,} bytes (to {total:,} at {name}), past the limit for this file"
    return None


def frame_problem(res: RunAnalysis) -> str | None:
    """The first frame whose columns or types are not its result's (None: all are)."""
    from charllm_trace.analysis.frame_schemas import ALL_FRAMES

    for name, df in res.frames().items():
        want = ALL_FRAMES.get(name)
        if want is None:
            continue
        for col, dtype in want[1].items():
            got = df.schema.get(col)
            if got is None:
                return f"frame {name}: no column {col!r:.40}"
            if got != dtype:
                return f"frame {name}: column {col!r:.40} of type {got}, not {dtype}"
    return None


def rank_problem(ranks: Any, what: str) -> str | None:
    from charllm_trace.core.limits import MAX_RANK

    bad = [r for r in ranks if type(r) is not int or not 0 <= r < MAX_RANK]
    return f"{what}: rank {bad[0]!r:.40} is not in 0..{MAX_RANK - 1}" if bad else None


def views_problem(doc: dict[str, Any]) -> str | None:
    """Why the saved views cannot be drawn (ranks, windows, origin), None when they can."""
    lanes = doc.get("lanes")
    if not isinstance(lanes, list) or not isinstance(doc.get("ranks"), list):
        return "views: malformed"
    why = rank_problem(doc["ranks"], "views") or rank_problem(
        [ln.get("rank") for ln in lanes if isinstance(ln, dict)], "views"
    )
    if why:
        return why
    for ln in lanes:
        w = ln.get("window") if isinstance(ln, dict) else None
        if not (isinstance(w, list) and len(w) == 2 and all(_int64(v) for v in w)):
            return f"views: lane window {w!r:.60} is not two integers of int64 nanoseconds"
    origin = doc.get("origin_ns")
    if origin is not None and not _int64(origin):
        return f"views: origin {origin!r:.40} is not an integer of int64 nanoseconds"
    return None


def _int64(v: Any) -> bool:
    return type(v) is int and _INT64[0] <= v <= _INT64[1]


def saved_problem(res: RunAnalysis, views: dict[str, Any] | None) -> str | None:
    """Why the decoded analysis and views may not be shown (None: they may)."""
    return (
        frame_problem(res)
        or rank_problem(res.ranks, "analysis")
        or (views_problem(views) if views is not None else None)
    )
