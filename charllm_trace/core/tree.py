"""The CPU call tree from time nesting, vectorized.

Within one thread, sort events by (start ascending, end descending, original order).
The parent of event *i* is the nearest earlier event *j* in that order with
``end_j >= end_i``: it started no later and ends no earlier, so it encloses *i*,
and being the nearest it is the innermost such event. That is the classic
"previous greater-or-equal element" problem; we solve it for all events at once
by pointer jumping (O(n) memory, a few numpy rounds for a call tree's depth; a
sparse table of running maxima with binary lifting finishes very deep nestings),
no per-event Python loop. Events that overlap partially (end after
their would-be parent) are not nested: they become siblings, as a call stack that
pops closed frames would make them.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def prev_greater_equal(e: np.ndarray, max_rounds: int = 64) -> np.ndarray:
    """For each i, the largest j < i with ``e[j] >= e[i]``, or -1.

    Pointer jumping in O(n) memory: start from ``p[i] = i - 1`` and, while ``e[p[i]] < e[i]``,
    jump to ``p[p[i]]``. Every element strictly between ``p[i]`` and ``i`` stays below ``e[i]``
    (the elements skipped are below ``e[p[i]]``), so the first ``p[i]`` with ``e[p[i]] >= e[i]`` is the
    answer. Call trees are shallow, so this settles in a few rounds; an input that needs more than
    ``max_rounds`` (a very deep nesting) is finished by the sparse-table method.
    """
    n = len(e)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    p = np.arange(-1, n - 1, dtype=np.int64)
    todo = np.flatnonzero(p >= 0)
    todo = todo[e[p[todo]] < e[todo]]
    rounds = 0
    while len(todo):
        if rounds == max_rounds:
            return _prev_greater_equal_table(e)
        p[todo] = p[p[todo]]
        todo = todo[p[todo] >= 0]
        todo = todo[e[p[todo]] < e[todo]]
        rounds += 1
    return p


def _prev_greater_equal_table(e: np.ndarray) -> np.ndarray:
    """``prev_greater_equal`` by a sparse table of running maxima and binary lifting (O(n log n))."""
    n = len(e)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    levels = [e]
    k = 1
    while (1 << k) <= n:
        prev = levels[-1]
        h = 1 << (k - 1)
        cur = prev.copy()
        np.maximum(prev[h:], prev[:-h], out=cur[h:])
        levels.append(cur)
        k += 1
    p = np.arange(n, dtype=np.int64) - 1
    for k in range(len(levels) - 1, -1, -1):
        step = 1 << k
        ok = p - step + 1 >= 0
        blk = levels[k][np.where(ok, p, 0)]
        p = np.where(ok & (blk < e), p - step, p)
    valid = (p >= 0) & (e[np.maximum(p, 0)] >= e)
    return np.where(valid, p, -1)


def nest_parents(df: pl.DataFrame) -> pl.Series:
    """Parent ``id`` of each row by time nesting within its (pid, tid).

    ``df`` needs columns id, pid, tid, start_ns, dur_ns (all rows on CPU threads). Returns an
    Int64 series aligned with ``df`` (null for roots).
    """
    n = df.height
    if n == 0:
        return pl.Series("parent", [], dtype=pl.Int64)
    # Only the sort order is computed on the table; the few arrays the walk needs are gathered in
    # that order one at a time (sorting a copy of the table would hold it twice).
    end = pl.col("start_ns") + pl.col("dur_ns")
    pid = df["pid"].fill_null(-1).to_numpy()
    tid = df["tid"].fill_null(-1).to_numpy()
    if df["start_ns"].null_count() or df["dur_ns"].null_count():
        order = (
            df.select(
                pl.arg_sort_by(
                    [pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1), "start_ns", end],
                    descending=[False, False, False, True],
                    maintain_order=True,  # ties keep their input order
                )
            )
            .to_series()
            .to_numpy()
        )
    else:  # numpy's stable sort is many times faster here (profilers write events nearly in order)
        start = df["start_ns"].to_numpy()
        order = np.lexsort((-(start + df["dur_ns"].to_numpy()), start, tid, pid))
        del start
    # One thread after another: make ends comparable only within a thread by processing per thread
    # boundary. Threads are few, so a loop over threads (not events) is fine.
    pid = pid[order]
    tid = tid[order]
    bounds = np.flatnonzero(np.r_[True, (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]), True])
    del pid, tid
    ends = df.select(end).to_series().to_numpy()[order]
    ids = df["id"].to_numpy()[order]
    parent_sorted = np.full(n, -1, dtype=np.int64)
    has_parent = np.zeros(n, dtype=bool)
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        pj = prev_greater_equal(ends[a:b])
        m = pj >= 0
        parent_sorted[a:b][m] = ids[a:b][pj[m]]
        has_parent[a:b] = m
    del ends, ids
    out = np.empty(n, dtype=np.int64)
    okpar = np.empty(n, dtype=bool)
    out[order] = parent_sorted
    okpar[order] = has_parent
    return pl.Series("parent", out, dtype=pl.Int64).set(pl.Series(~okpar), None)
