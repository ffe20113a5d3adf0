"""Each rank's share of the execution graph (analysis/rank_graph.py), as the Dask engine uses it:
re-timed alone with the virtual points' times the driver solves (analysis/graph_merge.py), every
point gets the run graph's time and binding edge."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from charllm_trace.analysis import graph_merge as gm
from charllm_trace.analysis import rank_graph as rgm
from charllm_trace.analysis.critical import retime
from charllm_trace.analysis.whatif import factor_array
from charllm_trace.core.dag import NONE
from charllm_trace.graph.run import build_run_graph, match_instances
from charllm_trace.inputs.loader import load
from tests.conftest import FIXTURES, shared_trace


def test_reduce_pairs_drops_what_another_virtual_point_explains():
    d = np.array([[NONE, 5, 9, 20], [NONE, NONE, 4, 7], [NONE, NONE, NONE, 3], [NONE] * 4], np.int64)
    rows = {(j, k): x for j, k, x in rgm.reduce_pairs(d).tolist()}
    # 0->2: 9 = 5 + 4 (through V1): implied; 0->3: 20 > 5 + 7 and > 9 + 3: kept; 1->3: 7 = 4 + 3
    assert rows == {(0, 1): 5, (1, 2): 4, (2, 3): 3, (0, 3): 20}


@pytest.mark.parametrize("factors", [None, {"comm": 0.5, "gemm": 0.8}, {"launch": 0.0}])
@pytest.mark.parametrize("path", ["fixture", "dlrm"])
def test_ranks_retimed_alone_match_the_run_graph(path, factors):
    src = FIXTURES / "cpu-2rank-gloo" if path == "fixture" else shared_trace("param/dlrm_8ranks_v100")
    run = load(src, cache=False)
    f = factor_array(factors) if factors else None
    whole = build_run_graph(run)
    t_run, b_run = retime(whole, f)
    shares = {r: rgm.rank_graph(r, run.traces[r]) for r in run.ranks}
    inst, _ = match_instances(
        [s.inst.with_columns(rank=pl.lit(r, dtype=pl.Int64)) for r, s in shares.items() if s.inst.height]
    )
    assert inst.height > 0
    n_v = int(inst["_v"].max()) + 1
    cons = []
    for r, s in shares.items():
        rgm.join(s, inst.filter(pl.col("rank") == r).select("_i", "_v", "_tr", "_vt"))
        a, d, left = rgm.contract(s, f)
        assert left == 0
        cons.append((s.vids, a, d))
    vt, v_left = gm.solve_virtual(n_v, cons)
    assert v_left == 0
    n_real = len(t_run) - n_v
    assert np.array_equal(vt, t_run[n_real:])  # the collectives' virtual points
    for r, s in shares.items():
        rgm.finish(s, "x", f, vt[s.vids])
        off, n = whole.offsets[r], s.n_real
        assert np.array_equal(s.times["x"][:n], t_run[off : off + n])
        # the same binding edge for every point: the same edge of the rank's graph
        mine, theirs = s.binds["x"][:n], b_run[off : off + n]
        assert np.array_equal(mine < 0, theirs < 0)
        has = mine >= 0
        src = s.g.src[mine[has]].astype(np.int64)  # the rank's points, then its copies of the Vs
        glob = np.where(src < n, src + off, n_real + s.vids[np.maximum(src - n, 0)])
        assert np.array_equal(glob, whole.g.src[theirs[has]])
        assert np.array_equal(s.g.kind[mine[has]], whole.g.kind[theirs[has]])
