"""Execution dependencies as a table (``model.EXEC_DEP_SCHEMA``): the point graph read back
at node level, for people and for exporters.

``execution_deps(trace)`` gives one rank's edges: ``thread_order``, ``nesting``, ``launch``,
``stream_order``, ``sync`` and ``data`` (``docs/model.md`` says what each means).
``run_execution_deps(run)`` adds, per rank, the ``collective`` edges to the same collective
instance on every other rank (``dep_rank`` names the other rank).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.core.model import EXEC_DEP_SCHEMA, Run, Trace, conform
from charllm_trace.graph import points as P
from charllm_trace.graph.run import RunGraph, build_run_graph


def _frame(node, dep, kind_codes, dep_end, node_end, dep_rank=None) -> pl.DataFrame:
    kinds = np.asarray(P.EDGE_KINDS, dtype=object)[kind_codes]
    df = pl.DataFrame(
        {
            "node": pl.Series(node, dtype=pl.Int64),
            "dep": pl.Series(dep, dtype=pl.Int64),
            "kind": pl.Series(kinds.tolist(), dtype=pl.String),
            "dep_end": pl.Series(dep_end, dtype=pl.Boolean),
            "node_end": pl.Series(node_end, dtype=pl.Boolean),
            "dep_rank": pl.Series(dep_rank if dep_rank is not None else [None] * len(node), dtype=pl.Int64),
        }
    )
    return conform(df, EXEC_DEP_SCHEMA)


def _rank_edges(rg: RunGraph, r: int) -> pl.DataFrame:
    """Rank ``r``'s own edges in the run graph (cycles already broken), at node level."""
    g = rg.g
    part = rg.parts[r]
    lo, hi = rg.offsets[r], rg.offsets[r] + part.n_points
    keep = (g.kind != P.EK["span"]) & (g.src >= lo) & (g.src < hi) & (g.dst >= lo) & (g.dst < hi)
    src, dst, kind = g.src[keep] - lo, g.dst[keep] - lo, g.kind[keep]
    return _frame(part.ids[dst // 2], part.ids[src // 2], kind, (src % 2) == 1, (dst % 2) == 1)


def execution_deps(trace: Trace, classified: pl.DataFrame | None = None) -> pl.DataFrame:
    """What must happen before what on one rank (EXEC_DEP_SCHEMA), from the trace's times
    (or, without timestamps, its recorded order)."""
    run = Run.single(trace)
    rg = build_run_graph(run, {run.ranks[0]: classified} if classified is not None else None)
    return _rank_edges(rg, run.ranks[0])  # after the run graph dropped data edges on cycles


def run_execution_deps(run: Run, graph: RunGraph | None = None) -> dict[int, pl.DataFrame]:
    """Per rank: its own execution dependencies plus ``collective`` edges from the same
    collective instance on the other ranks (a rank's instance ends after every rank started it)."""
    rg = graph or build_run_graph(run)
    out = {r: _rank_edges(rg, r) for r in rg.ranks}
    g = rg.g
    coll = g.kind == P.EK["collective"]
    into_v = coll & (rg.point_rank[g.dst] < 0)  # participant start -> V
    out_v = coll & (rg.point_rank[g.dst] >= 0)  # V -> participant end
    if not into_v.any():
        return out
    a = pl.DataFrame({"v": g.dst[into_v], "s_pt": g.src[into_v]})
    b = pl.DataFrame({"v": g.src[out_v], "e_pt": g.dst[out_v]})
    pairs = a.join(b, on="v")
    s_rank = rg.point_rank[pairs["s_pt"].to_numpy()]
    e_rank = rg.point_rank[pairs["e_pt"].to_numpy()]
    other = s_rank != e_rank
    s_pt = pairs["s_pt"].to_numpy()[other]
    e_pt = pairs["e_pt"].to_numpy()[other]
    s_rank, e_rank = s_rank[other], e_rank[other]
    offs = np.array([rg.offsets[int(r)] for r in s_rank], dtype=np.int64)
    offe = np.array([rg.offsets[int(r)] for r in e_rank], dtype=np.int64)
    for r in rg.ranks:
        sel = e_rank == r
        if not sel.any():
            continue
        dep_ids = np.array(
            [
                rg.parts[int(sr)].ids[(sp - so) // 2]
                for sr, sp, so in zip(s_rank[sel], s_pt[sel], offs[sel], strict=True)
            ],
            dtype=np.int64,
        )
        node_ids = rg.parts[r].ids[(e_pt[sel] - offe[sel]) // 2]
        n = int(sel.sum())
        extra = _frame(
            node_ids,
            dep_ids,
            np.full(n, P.EK["collective"], np.int8),
            np.zeros(n, bool),
            np.ones(n, bool),
            s_rank[sel],
        )
        out[r] = pl.concat([out[r], extra])
    return out
