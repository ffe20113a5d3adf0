"""The critical path and what-if of a run from its ranks' shares of the execution graph
(``analysis/rank_graph.py``): what the Dask driver computes across ranks, and the steps the
local path (``analysis/api.py``) and the driver share (why a graph analysis is skipped, the
per-step rows kept). Pure: no I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.analysis.critical import SIMULATED_CP, PathPiece, path_row
from charllm_trace.analysis.critical_batch import top_ops_named
from charllm_trace.analysis.results import (
    CRITICAL_OPS_SCHEMA,
    CRITICAL_PATH_SCHEMA,
    CRITICAL_SEGMENT_SCHEMA,
    NO_TIMESTAMPS,
    AnalyzeOptions,
    CriticalPathResult,
    WhatIfResult,
    frame,
)
from charllm_trace.analysis.whatif import SIMULATED_WI, fixed_wait_pct, whatif_steps
from charllm_trace.analysis.whatif_spread import step_spread
from charllm_trace.core import dag as engine


def skip_untimed(options: AnalyzeOptions, skipped: dict[str, str], no_ts: list[int]) -> bool:
    """True (the reasons in ``skipped``) when the graph analyses are not asked for or cannot run."""
    if not (options.critical_path or options.what_if):
        return True
    if no_ts:
        reason = NO_TIMESTAMPS.replace("overlap needs them", "the execution graph needs them")
        if options.critical_path:
            skipped["critical_path"] = reason
        if options.what_if:
            skipped["what_if"] = reason
        return True
    return False


def skip_cycles(options: AnalyzeOptions, skipped: dict[str, str], problem: str) -> None:
    for k, on in (("critical_path", options.critical_path), ("what_if", options.what_if)):
        if on:
            skipped[k] = f"the execution graph has dependency cycles ({problem})"


def keep_steps(
    options: AnalyzeOptions, cp: CriticalPathResult | None, wi: WhatIfResult | None
) -> tuple[CriticalPathResult | None, WhatIfResult | None]:
    """Per-step rows only when asked for, as in the other analyses."""
    if options.per_step:
        return cp, wi
    whole = pl.col("step").is_null()
    if cp is not None:
        cp = dataclasses.replace(
            cp,
            paths=cp.paths.filter(whole),
            top_ops=cp.top_ops.filter(whole),
            segments=cp.segments.filter(whole),
        )
    if wi is not None:
        wi = dataclasses.replace(wi, steps=wi.steps.filter(whole))
    return cp, wi


def graph_notes(
    rank_notes: list[tuple[int, list[str]]], match_notes: list[str], dropped: int, measured: bool
) -> list[str]:
    """The run graph's notes (``graph.run.build_run_graph``) from each rank's part notes (in rank
    order), the matching's and the dependencies dropped on cycles."""
    notes = list(match_notes)
    if dropped:
        what = "tensor data" if measured else "recorded"
        notes.append(f"{dropped} {what} dependencies were on dependency cycles and were not used")
    multi = len(rank_notes) > 1
    for r, ns in rank_notes:
        for note in ns:
            notes.insert(0, f"rank {r}: {note}" if multi else note)
    return notes


def solve_virtual(
    n_v: int, shares: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, int]:
    """Times of the run's ``n_v`` virtual points from each rank's (V ids, A, D rows (j, k, d))
    (``rank_graph.contract``): V_k is the latest start of its participants, a start
    ``max(A[k], max_j d + V_j)``. Returns (times, Vs not reached: more than 0 is a cycle across
    ranks)."""
    src, dst, lag = [], [], []
    root = np.full(n_v, engine.NONE, np.int64)
    for vids, a, d in shares:
        if len(vids) == 0:
            continue
        np.maximum.at(root, vids, a)
        src.append(vids[d[:, 0]])
        dst.append(vids[d[:, 1]])
        lag.append(d[:, 2])
    s = np.concatenate(src) if src else np.zeros(0, np.int64)
    d_ = np.concatenate(dst) if dst else np.zeros(0, np.int64)
    lg = np.concatenate(lag) if lag else np.zeros(0, np.int64)
    t, _, done = engine.longest_path(n_v, s, d_, lg, np.zeros(len(s), np.int8), root)
    return t, n_v - done


def bind_virtual(n_v: int, starts: list[tuple[int, np.ndarray, np.ndarray]]) -> np.ndarray:
    """The rank each virtual point binds to: its latest participant (on a tie the highest rank,
    whose edge comes last) from each rank's (rank, V ids, start times), in rank order."""
    best = np.full(n_v, engine.NONE, np.int64)
    who = np.full(n_v, -1, np.int64)
    for r, vids, t in starts:
        if len(vids) == 0:
            continue
        win = t >= best[vids]
        best[vids[win]] = t[win]
        who[vids[win]] = r
    return who


@dataclasses.dataclass
class Path:
    """A critical path being walked: its target and the pieces walked so far (latest first; the
    Dask engine keeps them summed into one, :func:`add_piece`), and each piece's op names (or
    where they wait: ``engine/graph_step._Names``)."""

    scope: str
    rank: int | None
    step: int | None
    start_ns: int  # its window's start (the walk's stop time)
    end_ns: int  # its end point's time
    pieces: list[PathPiece] = dataclasses.field(default_factory=list)
    names: list[Any] = dataclasses.field(default_factory=list)


def add_piece(path: Path, piece: PathPiece) -> None:
    """Add the next piece walked (earlier in time than those before) to ``path``, summed into
    one piece: what ``path_row``, the top ops' lengths and the what-if's fixed waits read of a
    path's pieces are sums, their ranks' union and the last piece's ``last_time``: one piece per
    path instead of one per rank crossed (tests/analysis/test_path_pieces.py). The pieces given
    are not changed."""
    if not path.pieces:
        path.pieces.append(
            dataclasses.replace(piece, cats=piece.cats.astype(np.int64), ranks=set(piece.ranks))
        )
        return
    acc = path.pieces[0]
    acc.cats += piece.cats
    acc.wait += piece.wait
    acc.n_segments += piece.n_segments
    acc.n_edges += piece.n_edges
    acc.ranks |= piece.ranks
    acc.last_time = piece.last_time


def critical_from(paths: list[Path], notes: list[str], measured: bool, top: int = 10) -> CriticalPathResult:
    """``critical.critical_path`` (without segments) from the walked paths, in target order."""
    rows = [path_row(p.scope, p.rank, p.step, p.start_ns, p.end_ns, p.pieces) for p in paths]
    walked = [p for p in paths if sum(pc.n_edges for pc in p.pieces)]
    notes = list(notes)
    if not measured:
        notes.insert(0, SIMULATED_CP)
    return CriticalPathResult(
        paths=frame(pl.DataFrame(rows) if rows else {}, CRITICAL_PATH_SCHEMA),
        top_ops=_top_ops(walked, top) if walked else frame({}, CRITICAL_OPS_SCHEMA),
        segments=frame({}, CRITICAL_SEGMENT_SCHEMA),
        simulated=not measured,
        notes=notes,
    )


def _top_ops(paths: list[Path], top: int) -> pl.DataFrame:
    """``critical.top_ops_of`` of each path's pieces' named sums, every path in one query
    (``critical_batch.top_ops_named``; a few polars queries per path cost the driver ~30 MiB of
    resident memory at 1,024 DLRM ranks, docs/benchmarks.md)."""
    pieces = [n for p in paths for n in p.names]
    per_path = [sum(n.height for n in p.names) for p in paths]
    named = (
        pl.concat(pieces, how="vertical")
        .with_columns(tgt=pl.Series(np.repeat(np.arange(len(paths), dtype=np.int64), per_path)))
        .group_by("tgt", "orank", "code", "cat")
        .agg(pl.col("time_ns").sum(), pl.col("count").sum(), pl.col("name").first())
    )
    keys = [(p.scope, p.rank, p.step, p.end_ns - p.pieces[-1].last_time) for p in paths]
    return top_ops_named(named, keys, top)


def whatif_from(
    rows: list[pl.DataFrame],
    waits: list[Path],
    factors: Mapping[str, float],
    notes: list[str],
    measured: bool,
) -> WhatIfResult:
    """``whatif.what_if`` from each rank's rows (in rank order) and its measured whole-trace path."""
    fixed = length = 0
    for p in waits:
        if sum(pc.n_edges for pc in p.pieces):
            fixed += sum(pc.wait for pc in p.pieces)
            length += p.end_ns - p.pieces[-1].last_time
    notes = list(notes)
    if not measured:
        notes.insert(0, SIMULATED_WI)
    steps = whatif_steps(rows)
    return WhatIfResult(
        steps=steps,
        factors=dict(factors),
        fixed_wait_pct=fixed_wait_pct(fixed, length, measured),
        simulated=not measured,
        notes=notes,
        **dataclasses.asdict(step_spread(steps)),
    )
