"""prev_greater_equal (the CPU call tree's core) against a brute-force scan, including nestings
deep enough to need the sparse-table finish."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from charllm_trace.core.tree import _prev_greater_equal_table, nest_parents, prev_greater_equal


def brute(e: np.ndarray) -> np.ndarray:
    out = []
    for i in range(len(e)):
        j = i - 1
        while j >= 0 and e[j] < e[i]:
            j -= 1
        out.append(j)
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("seed", range(5))
def test_random_arrays_match_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(0, 80))
        e = rng.integers(0, int(rng.integers(1, 30)), n).astype(np.int64)
        want = brute(e)
        assert np.array_equal(prev_greater_equal(e), want)
        assert np.array_equal(prev_greater_equal(e, max_rounds=1), want)  # sparse-table finish
        assert np.array_equal(_prev_greater_equal_table(e), want)


def test_deep_nesting_and_long_sibling_runs() -> None:
    deep = np.r_[10_000, np.ones(3000, dtype=np.int64), 5]  # equal ends nest: a 3000-deep chain
    rising = np.r_[10_000, np.arange(1, 3000, dtype=np.int64)]  # 3000 siblings under one parent
    for e in (deep, rising, np.arange(3000, 0, -1, dtype=np.int64)):
        assert np.array_equal(prev_greater_equal(e), brute(e))


def test_nest_parents_per_thread() -> None:
    # thread (1, 1): A [0, 100) holds B [10, 50) holds C [20, 30); D [60, 70) under A.
    # thread (1, 2): E [15, 40) alone; F [15, 40) same span nests under E (earlier row).
    df = pl.DataFrame(
        {
            "id": [0, 1, 2, 3, 4, 5],
            "pid": [1, 1, 1, 1, 1, 1],
            "tid": [1, 1, 1, 1, 2, 2],
            "start_ns": [0, 10, 20, 60, 15, 15],
            "dur_ns": [100, 40, 10, 10, 25, 25],
        }
    )
    assert nest_parents(df).to_list() == [None, 0, 1, 0, None, 4]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nest_parents_matches_a_brute_force_call_stack(seed: int) -> None:
    """Random events on a few threads with many equal starts and ends (ties keep row order),
    against a per-event scan back for the nearest earlier event that ends no earlier."""
    rng = np.random.default_rng(seed)
    n = 400
    pid = rng.integers(0, 2, n)
    tid = rng.integers(0, 3, n)
    start = rng.integers(0, 50, n) * 10
    dur = rng.integers(0, 6, n) * 10
    ids = rng.permutation(n) + 1000
    df = pl.DataFrame({"id": ids, "pid": pid, "tid": tid, "start_ns": start, "dur_ns": dur})
    order = sorted(range(n), key=lambda i: (pid[i], tid[i], start[i], -(start[i] + dur[i]), i))
    want: list[int | None] = [None] * n
    for k, i in enumerate(order):
        for j in reversed(order[:k]):
            if (pid[j], tid[j]) != (pid[i], tid[i]):
                break
            if start[j] + dur[j] >= start[i] + dur[i]:
                want[i] = int(ids[j])
                break
    assert nest_parents(df).to_list() == want
    # a row with no start (alone on its own thread) sends the table through polars' sort instead
    extra = pl.DataFrame({"id": [-1], "pid": [99], "tid": [0], "start_ns": [None], "dur_ns": [5]})
    assert nest_parents(pl.concat([df, extra], how="vertical_relaxed")).to_list() == [*want, None]
