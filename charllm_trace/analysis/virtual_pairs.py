"""The (V_j, V_k) pairs a rank sends for the run's virtual-point times (``rank_graph.contract``),
found without the K x K x K comparison of every pair with every intermediate V.

A pair (j, k) is needed unless a longest path from V_j to the rank's start of instance k runs
through another of its virtual points V_i (then ``D[j, k] = D[j, i] + D[i, k]`` and the two
other pairs imply it). One longest-path pass per V_j answers that for every k at once: each
edge's lag is scaled by M (more than the Vs a path can hold) and an edge leaving a V gets 1
more, so a point's time is ``M * longest + the most Vs on any longest path`` to it (ties
included). A start reached with exactly one V (V_j itself) is a pair to keep. K passes over the
rank's graph instead of K passes and K^3 additions; the rows and their order are those of
``rank_graph.reduce_pairs``.

Pure: no I/O.
"""

from __future__ import annotations

import numpy as np

from charllm_trace.core import dag as engine

NONE = engine.NONE
#: scaled path lengths stay below this (int64 with room)
LIMIT = 1 << 62


def scaled_lags(lag: np.ndarray, src: np.ndarray, n_real: int, m: int) -> np.ndarray | None:
    """``lag * m`` plus 1 on the edges leaving a virtual point (index ``>= n_real``); None when a
    path could overflow int64 so scaled."""
    lag = np.asarray(lag, dtype=np.int64)
    pos = int(np.clip(lag, 0, None).sum(dtype=np.float64))
    neg = int(-np.clip(lag, None, 0).sum(dtype=np.float64))
    if (max(pos, neg) + 1) * m >= LIMIT:
        return None
    return lag * m + (np.asarray(src) >= n_real).astype(np.int64)


def kept_pairs(
    n_points: int,
    src: np.ndarray,
    dst: np.ndarray,
    lag: np.ndarray,
    prio: np.ndarray,
    n_real: int,
    starts: np.ndarray,
) -> np.ndarray | None:
    """(j, k, D[j, k]) rows, int64, of the pairs no other V explains, for the K virtual points at
    ``n_real + j`` and their starts ``starts[k]``; None when the scaled lags would overflow (the
    caller then compares the pairs one by one)."""
    k = len(starts)
    m = k + 2  # a path holds at most K Vs
    scaled = scaled_lags(lag, src, n_real, m)
    if scaled is None:
        return None
    rows = [np.zeros((0, 3), np.int64)]
    for j in range(k):
        root = np.full(n_points, NONE, np.int64)
        root[n_real + j] = 0
        t, _, _ = engine.longest_path(n_points, src, dst, scaled, prio, root)
        s = t[starts]
        hit = np.flatnonzero((s != NONE) & (s % m == 1))
        rows.append(np.stack([np.full(len(hit), j, np.int64), hit.astype(np.int64), s[hit] // m], axis=1))
    return np.concatenate(rows)
