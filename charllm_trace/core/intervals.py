"""Vectorized interval algebra on integer-ns half-open intervals ``[start, end)``.

Everything is numpy: a sort, a cumulative maximum and prefix sums; no Python loop
over intervals. The measure of an intersection is obtained by inclusion-exclusion,
``|A ∩ B| = |A| + |B| - |A ∪ B|``, which holds for any measurable sets, so only
unions are ever materialised.
"""

from __future__ import annotations

import numpy as np

I64 = np.int64


def _arr(x: object) -> np.ndarray:
    return np.asarray(x, dtype=I64)


def merge(starts: object, ends: object) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint intervals (touching ones are joined).

    Empty and negative-length intervals are dropped.
    """
    s = _arr(starts)
    e = _arr(ends)
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = e[order]
    run_end = np.maximum.accumulate(e)
    # a new merged interval begins where the start exceeds every earlier end
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = s.size - 1
    return s[first], run_end[last]


def length(starts: object, ends: object) -> int:
    """Measure of the union of the intervals."""
    s, e = merge(starts, ends)
    return int((e - s).sum())


def union(*sets: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Union of several interval sets."""
    if not sets:
        return np.empty(0, I64), np.empty(0, I64)
    return merge(np.concatenate([_arr(a) for a, _ in sets]), np.concatenate([_arr(b) for _, b in sets]))


def measure_before(ms: np.ndarray, me: np.ndarray, t: object) -> np.ndarray:
    """F(t) = |union ∩ (-inf, t)| for merged intervals (``ms``, ``me``), vectorized in ``t``."""
    t = _arr(t)
    if ms.size == 0:
        return np.zeros(t.shape, dtype=I64)
    cum = np.concatenate([[0], np.cumsum(me - ms)])  # measure of the first k intervals
    k = np.searchsorted(ms, t, side="right")  # intervals starting before or at t
    # the k-th interval (index k-1) may contain t: subtract the part after t
    idx = np.maximum(k - 1, 0)
    partial = np.where(k > 0, np.maximum(me[idx] - np.maximum(t, ms[idx]), 0), 0)
    return cum[k] - partial


def measure_in(ms: np.ndarray, me: np.ndarray, w0: object, w1: object) -> np.ndarray:
    """|union ∩ [w0, w1)| for each window, vectorized. ``ms``/``me`` must be merged."""
    w0 = _arr(w0)
    w1 = _arr(w1)
    return np.maximum(measure_before(ms, me, w1) - measure_before(ms, me, w0), 0)


def intersection_in(
    a: tuple[np.ndarray, np.ndarray],
    b: tuple[np.ndarray, np.ndarray],
    w0: object,
    w1: object,
    ab: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """|A ∩ B ∩ [w0, w1)| per window, by inclusion-exclusion. ``a``, ``b`` merged;
    pass ``ab`` (the merged union) when already computed."""
    if ab is None:
        ab = union(a, b)
    return measure_in(*a, w0, w1) + measure_in(*b, w0, w1) - measure_in(*ab, w0, w1)


def intersect(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The intersection A ∩ B of two merged sets, as merged intervals (vectorized sweep)."""
    a_s, a_e = a
    b_s, b_e = b
    if a_s.size == 0 or b_s.size == 0:
        return np.empty(0, I64), np.empty(0, I64)
    # boundary sweep: +1 at starts, -1 at ends of each set; inside both when depth == 2
    t = np.concatenate([a_s, a_e, b_s, b_e])
    d = np.concatenate(
        [np.ones(a_s.size, I64), -np.ones(a_e.size, I64), np.ones(b_s.size, I64), -np.ones(b_e.size, I64)]
    )
    # at equal times process ends before starts so touching intervals do not count
    order = np.lexsort((d, t))
    t = t[order]
    depth = np.cumsum(d[order])
    inside = depth == 2
    idx = np.flatnonzero(inside[:-1])
    s, e = t[idx], t[idx + 1]
    return merge(s, e)


def round_inward_us(starts: object, ends: object) -> tuple[np.ndarray, np.ndarray]:
    """Intervals rounded inwards to whole microseconds (start up, end down; never negative), as
    Holistic Trace Analysis rounds float timestamps (``hta_compat``, docs/analyses.md section 2)."""
    s = _arr(starts)
    e = _arr(ends)
    s = -((-s) // 1000) * 1000
    e = (e // 1000) * 1000
    return s, np.maximum(e, s)
