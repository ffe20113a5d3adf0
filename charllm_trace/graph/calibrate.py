"""Calibration of a point graph on measured times (``points`` module docstring), and adding edges
to a built graph."""

from __future__ import annotations

import numpy as np

from charllm_trace.graph.pointgraph import CAT, EK, PointGraph


def append_edges(g: PointGraph, src, dst, lag, kind: int, cat: int, prio: int) -> None:
    m = len(src)
    g.src = np.concatenate([g.src, src.astype(np.int32)])
    g.dst = np.concatenate([g.dst, dst.astype(np.int32)])
    g.base = np.concatenate([g.base, lag.astype(np.int64)])
    g.fixed = np.concatenate([g.fixed, np.zeros(m, np.int64)])
    g.wclass = np.concatenate([g.wclass, np.full(m, -1, np.int8)])
    g.kind = np.concatenate([g.kind, np.full(m, kind, np.int8)])
    g.cat = np.concatenate([g.cat, np.full(m, cat, np.int8)])
    g.owner = np.concatenate([g.owner, np.full(m, -1, np.int32)])
    g.prio = np.concatenate([g.prio, np.full(m, prio, np.int8)])


def calibrate(g: PointGraph) -> None:
    """Clip every lag to the measured gap and put each point's unexplained wait on its lane edge
    (fixed), so that the graph replays to the measured times (module docstring)."""
    t = g.time
    g.base = np.minimum(g.base, t[g.dst] - t[g.src])
    g.fixed = np.zeros(len(g.src), dtype=np.int64)
    cand = t[g.src] + g.base
    by_dst = np.argsort(g.dst, kind="stable")
    d_sorted = g.dst[by_dst]
    heads = np.flatnonzero(np.r_[True, d_sorted[1:] != d_sorted[:-1]]) if len(d_sorted) else d_sorted
    best = np.full(g.n_points, np.iinfo(np.int64).min, dtype=np.int64)
    if len(heads):
        best[d_sorted[heads]] = np.maximum.reduceat(cand[by_dst], heads)
    del heads
    best = np.maximum(best, g.root)
    need = np.flatnonzero((t > best) & (best > np.iinfo(np.int64).min))
    del best
    if len(need) == 0:
        return
    # carrier: the lane edge into the point if any, else the cross edge that came closest
    is_lane = np.isin(g.kind, [EK["span"], EK["thread_order"], EK["nesting"], EK["stream_order"]])
    # a sync or collective edge into the point (a wait the trace shows) carries it before the lane
    big = np.iinfo(np.int64).max
    waits = (g.kind == EK["sync"]) | (g.kind == EK["collective"]) | (g.kind == EK["wake"])
    score = np.where(waits, big, np.where(is_lane, big - 1, np.minimum(cand, big - 2)))
    del waits, is_lane, cand
    order = by_dst[np.lexsort((score[by_dst], d_sorted))]
    del score, by_dst, d_sorted
    last_of = np.searchsorted(g.dst[order], need, side="right") - 1
    ok = (last_of >= 0) & (g.dst[order][np.maximum(last_of, 0)] == need)
    e = order[last_of[ok]]
    g.fixed[e] += t[g.dst[e]] - (t[g.src[e]] + g.base[e])
    g.cat[e] = np.where(g.kind[e] == EK["stream_order"], CAT["sync_wait"], g.cat[e])
