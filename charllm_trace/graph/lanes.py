"""Lanes and call trees of the point graph: dense lane codes, time nesting per thread, depths,
pre-order subtrees, and the cuts that keep each lane's tour time-ordered. Numpy over arrays of
nodes, no per-node Python loop."""

from __future__ import annotations

import numpy as np
import polars as pl


def pos_of(ids: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """Index in ``ids`` of each ref (-1: missing); refs may hold -1 for none."""
    if len(ids) == 0:
        return np.full(len(refs), -1, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    k = np.minimum(np.searchsorted(s, refs), len(s) - 1)
    return np.where((s[k] == refs) & (refs >= 0), order[k], -1)


def dense_codes(*keys: np.ndarray) -> np.ndarray:
    """Dense code of each row's key tuple: a 64-bit hash per row, one sort of the hashes, and a
    check that every row's keys equal its code's first row's (else an exact lexsort)."""
    if len(keys[0]) == 0:
        return np.zeros(0, dtype=np.int64)
    cols = [np.asarray(k, dtype=np.int64) for k in keys]
    h = pl.DataFrame({f"k{i}": c for i, c in enumerate(cols)}).hash_rows(seed=7).to_numpy()
    _, first, code = np.unique(h, return_index=True, return_inverse=True)
    code = code.reshape(-1).astype(np.int64)
    if all(np.array_equal(c[first][code], c) for c in cols):
        return code
    order = np.lexsort(tuple(reversed(cols)))  # pragma: no cover - a 64-bit hash collision
    stacked = np.stack([c[order] for c in cols], axis=1)
    new = np.r_[True, (stacked[1:] != stacked[:-1]).any(axis=1)]
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.cumsum(new) - 1
    return out


def depth_of(ppos: np.ndarray) -> np.ndarray:
    """Number of ancestors of each row (list ranking by pointer jumping; cycles stop at 64 rounds)."""
    n = len(ppos)
    d = (ppos >= 0).astype(np.int64)
    jump = ppos.copy()
    for _ in range(64):
        valid = jump >= 0
        if not valid.any():
            break
        d[valid] += d[jump[valid]]
        nxt = np.full(n, -1, dtype=np.int64)
        nxt[valid] = jump[jump[valid]]
        jump = nxt
    return d


def time_parents(start: np.ndarray, end: np.ndarray, lane: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """Innermost enclosing op on the same CPU lane (-1: none); GPU ops have none."""
    from charllm_trace.core.tree import prev_greater_equal

    n = len(start)
    ppos = np.full(n, -1, dtype=np.int64)
    cpu = np.flatnonzero(~gpu)
    if len(cpu) == 0:
        return ppos
    t0 = int(min(start[cpu].min(), end[cpu].min()))
    rel_e = end[cpu] - t0
    span = int(rel_e.max()) + 1
    order = np.lexsort((cpu, -rel_e, start[cpu], lane[cpu]))
    if float(lane.max() + 1) * span < 2**62:  # lanes apart: an earlier lane's key is always smaller
        p = prev_greater_equal(lane[cpu][order] * span + rel_e[order])
    else:  # pragma: no cover - a trace spanning centuries
        p = prev_greater_equal(rel_e[order])
    ok = p >= 0
    ok[ok] &= lane[cpu][order][p[ok]] == lane[cpu][order][ok]
    ppos[cpu[order[ok]]] = cpu[order[p[ok]]]
    return ppos


def make_monotone(
    start: np.ndarray, end: np.ndarray, ppos: np.ndarray, depth: np.ndarray, lane: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """Cut ends so that each lane's tour is time-ordered: an op ends no later than the next op
    after its subtree on its lane starts, and no later than its parent ends. Returns the starts,
    the ends, how many were cut, and each node's pre-order index and that of its subtree's last
    node (the lanes' tour by (lane, start, depth, id): ``points._lane_chains`` reuses them)."""
    s, e = start, end.copy()
    n = len(s)
    cut = np.zeros(n, dtype=bool)
    order = np.lexsort((ids, depth, s, lane))
    pre = np.empty(n, dtype=np.int64)
    pre[order] = np.arange(n)
    last = subtree_last(pre, ppos, depth)
    for _ in range(16):
        changed = False
        nxt = last + 1
        has = nxt < n
        cand = np.flatnonzero(has)
        j = order[nxt[cand]]
        same = lane[j] == lane[cand]
        cand, j = cand[same], j[same]
        over = e[cand] > s[j]
        if over.any():
            i = cand[over]
            e[i] = np.maximum(s[j[over]], s[i])
            cut[i] = True
            changed = True
        kid = np.flatnonzero(ppos >= 0)
        out = e[kid] > e[ppos[kid]]
        if out.any():
            i = kid[out]
            e[i] = np.maximum(e[ppos[i]], s[i])
            cut[i] = True
            changed = True
        if not changed:
            break
    return s, e, int(cut.sum()), pre, last


def subtree_last(pre: np.ndarray, ppos: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Pre-order index of the last node of each subtree (children before parents, by depth)."""
    last = pre.copy()
    if not (ppos >= 0).any():
        return last
    maxd = int(depth.max())
    by_depth = np.argsort(-depth, kind="stable")
    bounds = np.searchsorted(-depth[by_depth], np.arange(-maxd, 1))
    for di in range(len(bounds) - 1):
        sel = by_depth[bounds[di] : bounds[di + 1]]
        sel = sel[ppos[sel] >= 0]
        if len(sel):
            np.maximum.at(last, ppos[sel], last[sel])
    return last


def self_durations(dur: np.ndarray, ppos: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    has = np.flatnonzero((ppos >= 0) & ~gpu)
    sums = np.bincount(ppos[has], weights=dur[has].astype(np.float64), minlength=len(dur)).astype(np.int64)
    return np.maximum(dur - sums, 0)
