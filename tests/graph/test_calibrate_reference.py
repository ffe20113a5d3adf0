"""Calibration (``graph/calibrate.py``) gives, array for array, what its first form gave: that
form sorted every edge by destination to take each point's latest arrival and ranked all edges to
pick the carrier of each point's unexplained wait; the present one takes the arrivals with
``np.maximum.at`` and ranks only the edges into points that waited. Compared on random graphs
with many equal times (ties in the ranking) and on the point graphs of generated runs and of the
real H200 fixture."""

from __future__ import annotations

import copy
import random
from types import SimpleNamespace

import numpy as np
import pytest

from charllm_trace.graph import points as P
from charllm_trace.graph.calibrate import calibrate
from charllm_trace.graph.pointgraph import CAT, EK
from charllm_trace.inputs import loader
from tests.conftest import FIXTURES
from tests.graph.test_graph_critical import random_run


def reference_calibrate(g) -> None:
    """The first form of ``calibrate`` (every edge sorted by destination, then ranked)."""
    t = g.time
    lag = np.minimum(g.base, t[g.dst] - t[g.src])
    g.fixed = np.minimum(lag, 0)
    g.base = np.maximum(lag, 0)
    cand = t[g.src] + lag
    by_dst = np.argsort(g.dst, kind="stable")
    d_sorted = g.dst[by_dst]
    heads = np.flatnonzero(np.r_[True, d_sorted[1:] != d_sorted[:-1]]) if len(d_sorted) else d_sorted
    best = np.full(g.n_points, np.iinfo(np.int64).min, dtype=np.int64)
    if len(heads):
        best[d_sorted[heads]] = np.maximum.reduceat(cand[by_dst], heads)
    best = np.maximum(best, g.root)
    need = np.flatnonzero((t > best) & (best > np.iinfo(np.int64).min))
    if len(need) == 0:
        return
    is_lane = np.isin(g.kind, [EK["span"], EK["thread_order"], EK["nesting"], EK["stream_order"]])
    waits = (g.kind == EK["sync"]) | (g.kind == EK["collective"]) | (g.kind == EK["wake"])
    tier = (waits | is_lane).astype(np.int8)
    pref = waits.astype(np.int8)
    order = by_dst[np.lexsort((pref[by_dst], cand[by_dst], tier[by_dst], d_sorted))]
    last_of = np.searchsorted(g.dst[order], need, side="right") - 1
    ok = (last_of >= 0) & (g.dst[order][np.maximum(last_of, 0)] == need)
    e = order[last_of[ok]]
    g.fixed[e] += t[g.dst[e]] - (t[g.src[e]] + g.base[e] + g.fixed[e])
    g.cat[e] = np.where(g.kind[e] == EK["stream_order"], CAT["sync_wait"], g.cat[e])


def same_after_both(g) -> None:
    want, got = copy.deepcopy(g), copy.deepcopy(g)
    reference_calibrate(want)
    calibrate(got)
    for name in ("base", "fixed", "cat"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        assert getattr(got, name).dtype == getattr(want, name).dtype, name


def random_graph(seed: int) -> SimpleNamespace:
    """Random edges over few distinct times and lags: many points wait, many carriers tie."""
    rng = np.random.default_rng(seed)
    n, m = 200, 1200
    kinds = np.asarray(list(EK.values()), dtype=np.int8)
    return SimpleNamespace(
        n_points=n,
        time=rng.integers(0, 12, n).astype(np.int64) * 10,
        root=np.where(rng.random(n) < 0.1, rng.integers(0, 120, n), np.iinfo(np.int64).min).astype(np.int64),
        src=rng.integers(0, n, m).astype(np.int32),
        dst=rng.integers(0, n, m).astype(np.int32),
        base=rng.integers(-20, 60, m).astype(np.int64) // 10 * 10,
        fixed=np.zeros(m, np.int64),
        kind=rng.choice(kinds, m),
        cat=rng.integers(0, len(CAT), m).astype(np.int8),
    )


@pytest.mark.parametrize("seed", range(8))
def test_calibrate_equals_reference_on_random_graphs(seed: int) -> None:
    g = random_graph(seed)
    want = copy.deepcopy(g)
    reference_calibrate(want)
    assert (want.fixed > 0).any()  # some points waited: the carrier ranking is exercised
    same_after_both(g)


@pytest.mark.parametrize("seed", range(4))
def test_calibrate_equals_reference_on_generated_runs(seed: int) -> None:
    run = random_run(random.Random(seed), n_ranks=1, n_coll=seed % 3)
    same_after_both(P.build(run.traces[run.ranks[0]], calibrated=False))


def test_calibrate_equals_reference_on_h200() -> None:
    run = loader.load(FIXTURES / "h200-1rank-nccl", cache=False)
    same_after_both(P.build(run.traces[run.ranks[0]], calibrated=False))
