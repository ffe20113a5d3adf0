"""The pairs of virtual points a rank sends (analysis/virtual_pairs.py) are the ones the K^3
comparison (``rank_graph.reduce_pairs`` over every D[j, k]) keeps: on hand-made graphs whose
answer is worked out below, on random graphs with many equal-length paths, and on the ranks of
the fixture run and the shared DLRM set."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import FIXTURES, shared_trace

from charllm_trace.analysis import rank_graph as rgm
from charllm_trace.analysis.virtual_pairs import kept_pairs, scaled_lags
from charllm_trace.analysis.whatif import factor_array
from charllm_trace.core import dag as engine
from charllm_trace.graph.run import match_instances
from charllm_trace.inputs.loader import load

NONE = engine.NONE


def _oracle(n_points, src, dst, lag, prio, n_real, starts):
    d = np.full((len(starts), len(starts)), NONE, np.int64)
    for j in range(len(starts)):
        root = np.full(n_points, NONE, np.int64)
        root[n_real + j] = 0
        d[j] = engine.longest_path(n_points, src, dst, lag, prio, root)[0][starts]
    return rgm.reduce_pairs(d)


def _three(direct: int):
    """Starts s_i = 2i, ends 2i + 1, V_i = 6 + i; transfer 1, 3, 1; e0 -> s1 (2), e1 -> s2 (1),
    and e0 -> s2 with lag ``direct``. D[0,1] = 1 + 2 = 3, D[1,2] = 3 + 1 = 4, through V1
    D[0,2] = 3 + 4 = 7; directly 1 + direct."""
    src = [0, 2, 4, 6, 7, 8, 1, 3, 1]
    dst = [6, 7, 8, 1, 3, 5, 2, 4, 4]
    lag = [0, 0, 0, 1, 3, 1, 2, 1, direct]
    a = [np.array(x, np.int32) for x in (src, dst)]
    return 9, a[0], a[1], np.array(lag, np.int64), np.zeros(9, np.int8), 6, np.array([0, 2, 4])


@pytest.mark.parametrize(
    ("direct", "expected"),
    [
        (6, [[0, 1, 3], [1, 2, 4]]),  # a tie: the direct edge is as long as the path through V1
        (5, [[0, 1, 3], [1, 2, 4]]),  # shorter: through V1 is the longest
        (7, [[0, 1, 3], [0, 2, 8], [1, 2, 4]]),  # longer: V0 -> s2 not explained by V1
    ],
)
def test_hand_made_chain(direct, expected):
    args = _three(direct)
    assert kept_pairs(*args).tolist() == expected
    assert _oracle(*args).tolist() == expected


def _random_graph(rng: np.random.Generator):
    k = int(rng.integers(1, 9))
    n_real = 2 * k + int(rng.integers(0, 12))
    order = rng.permutation(n_real)  # topological order of the real points
    pos = np.argsort(order)
    pts = np.sort(rng.choice(n_real, 2 * k, replace=False)).reshape(k, 2)
    starts, ends = order[pts[:, 0]], order[pts[:, 1]]
    m = int(rng.integers(0, 3 * n_real + 1))
    a, b = rng.integers(0, n_real, m), rng.integers(0, n_real, m)
    fwd = pos[a] < pos[b]
    src = np.r_[a[fwd], starts, n_real + np.arange(k)]
    dst = np.r_[b[fwd], n_real + np.arange(k), ends]
    lag = np.r_[rng.integers(-2, 4, int(fwd.sum())), np.zeros(k, np.int64), rng.integers(0, 4, k)]
    n = len(src)
    return (n_real + k, src.astype(np.int32), dst.astype(np.int32), lag.astype(np.int64),
            rng.integers(0, 3, n).astype(np.int8), n_real, starts.astype(np.int64))  # fmt: skip


def test_random_graphs_with_ties_equal_the_cubic_comparison():
    dropped = kept = 0
    for seed in range(400):
        args = _random_graph(np.random.default_rng(seed))
        want = _oracle(*args)
        assert np.array_equal(kept_pairs(*args), want), seed
        finite = int((_oracle_d(*args) != NONE).sum())
        kept, dropped = kept + len(want), dropped + finite - len(want)
    assert kept > 100 and dropped > 50  # both outcomes exercised (478 and 68 pairs)


def _oracle_d(n_points, src, dst, lag, prio, n_real, starts):
    return (
        np.stack(
            [
                engine.longest_path(
                    n_points, src, dst, lag, prio, np.where(np.arange(n_points) == n_real + j, 0, NONE)
                )[0][starts]
                for j in range(len(starts))
            ]  # fmt: skip
        )
        if len(starts)
        else np.zeros((0, 0), np.int64)
    )


def test_lags_too_long_to_tag_fall_back():
    n, src, dst, _, prio, n_real, starts = _three(6)
    lag = np.array([0, 0, 0, 1, 3, 1, 2, 1, 1 << 60], np.int64)
    assert scaled_lags(lag, src, n_real, 5) is None
    assert kept_pairs(n, src, dst, lag, prio, n_real, starts) is None


@pytest.mark.parametrize("factors", [None, {"comm": 0.5, "gemm": 0.8}])
@pytest.mark.parametrize("path", ["fixture", "dlrm"])
def test_ranks_pairs_equal_the_cubic_comparison(path, factors):
    src = FIXTURES / "cpu-2rank-gloo" if path == "fixture" else shared_trace("param/dlrm_8ranks_v100")
    run = load(src, cache=False)
    f = factor_array(factors) if factors else None
    shares = {r: rgm.rank_graph(r, run.traces[r]) for r in run.ranks}
    inst, _ = match_instances(
        [s.inst.with_columns(rank=pl.lit(r, dtype=pl.Int64)) for r, s in shares.items() if s.inst.height]
    )
    total = 0
    for r, s in shares.items():
        rgm.join(s, inst.filter(pl.col("rank") == r).select("_i", "_v", "_tr", "_vt"))
        g, n, k = s.g, s.n_real, len(s.vids)
        lag = g.lags(f)
        want = rgm.reduce_pairs(rgm.longest_from_each(g, lag, n, k, 2 * s.li))
        _, got, _ = rgm.contract(s, f)
        assert np.array_equal(got, want), r
        total += len(want)
    assert total > 0
