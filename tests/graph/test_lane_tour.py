"""The lanes' tour that ``lanes.make_monotone`` returns (each node's pre-order index and that of
its subtree's last node) is the one the point graph made on its own before reusing it: a lexsort
by (lane, start, depth, id) and ``subtree_last``, with the starts and parents ``make_monotone``
leaves unchanged. On generated runs and the real H200 fixture."""

from __future__ import annotations

import random

import numpy as np
import pytest

from charllm_trace.core.classify import classify
from charllm_trace.graph import points as P
from charllm_trace.graph.lanes import depth_of, make_monotone, subtree_last, time_parents
from charllm_trace.inputs import loader
from tests.conftest import FIXTURES
from tests.graph.test_graph_critical import random_run


def check_tour(trace) -> None:
    r, _dur, depth, tour, _cpu_work = P._point_rows(trace, classify(trace.nodes), [])
    assert isinstance(tour, tuple)  # measured times: the tour comes with the call trees
    pre, last = tour
    order = np.lexsort((r.ids, depth, r.start, r.lane))
    want_pre = np.empty(r.n, dtype=np.int64)
    want_pre[order] = np.arange(r.n)
    np.testing.assert_array_equal(pre, want_pre)
    np.testing.assert_array_equal(last, subtree_last(want_pre, r.ppos, depth))
    np.testing.assert_array_equal(depth, depth_of(r.ppos))


def test_make_monotone_keeps_starts_and_returns_its_tour() -> None:
    rng = np.random.default_rng(3)
    n = 300
    start = np.sort(rng.integers(0, 10_000, n)).astype(np.int64)
    end = start + rng.integers(0, 800, n)
    lane = rng.integers(0, 3, n).astype(np.int64)
    gpu = np.zeros(n, dtype=bool)
    ids = np.arange(n, dtype=np.int64)
    ppos = time_parents(start, end, lane, gpu)
    depth = depth_of(ppos)
    s, e, _cut, pre, last = make_monotone(start, end, ppos, depth, lane, ids)
    np.testing.assert_array_equal(s, start)
    assert (e <= np.where(ppos >= 0, e[np.maximum(ppos, 0)], e)).all()
    order = np.lexsort((ids, depth, start, lane))
    np.testing.assert_array_equal(order, np.argsort(pre))
    np.testing.assert_array_equal(last, subtree_last(pre, ppos, depth))


@pytest.mark.parametrize("seed", range(4))
def test_tour_on_generated_runs(seed: int) -> None:
    run = random_run(random.Random(seed), n_ranks=1, n_coll=seed % 3)
    check_tour(run.traces[run.ranks[0]])


def test_tour_on_h200() -> None:
    run = loader.load(FIXTURES / "h200-1rank-nccl", cache=False)
    check_tour(run.traces[run.ranks[0]])
