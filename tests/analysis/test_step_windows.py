"""Per-step figures on GPU time (issue 13): disjoint step windows that cover the GPU timeline,
orphan kernels (no launching CPU call) counted in the window holding their GPU start and
reported, one definition for overlap, bandwidth, energy and power; HTA's launch-time rule kept
under ``hta_compat``."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from charllm_trace.analysis.bandwidth import collectives
from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.energy import energy
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.power import power
from charllm_trace.analysis.step_windows import StepWindows, step_windows
from charllm_trace.core.classify import classify
from tests.helpers.analysis_helpers import T0, cpu, kernel, make_trace

M = 1_000_000  # 1 ms in ns


def _lagging_trace() -> object:
    """Three 100 ms ProfilerSteps. Step k (CPU start s) launches a GEMM at s+10 that runs on the
    GPU at [s+60, s+140) ([280, 360) in step 3) and an all-reduce at s+50 that runs at
    [s+130, s+170): the GPU work of a step runs into the next step's (launch-time steps overlap
    by 10 ms on the GPU). Two all-reduces have no launcher (correlation 0, which a runtime call
    early in step 1 also carries) and run at [245, 250) and [345, 350). GPU idle: [270, 280)."""
    rows = [cpu(1, "cudaGetDevice", 1 * M, M, kind="runtime", correlation=0)]
    nid = 10
    for k in range(3):
        s = k * 100 * M
        rows += [
            cpu(nid, f"ProfilerStep#{k + 1}", s, 100 * M, kind="annotation"),
            cpu(nid + 1, "cudaLaunchKernel", s + 10 * M, M, kind="runtime", correlation=100 + k),
            cpu(nid + 2, "cudaLaunchKernel", s + 50 * M, M, kind="runtime", correlation=200 + k),
            kernel(nid + 3, "gemm", s + (80 if k == 2 else 60) * M, 80 * M, correlation=100 + k),
            kernel(
                nid + 4,
                "ncclDevKernel_AllReduce",
                s + 130 * M,
                40 * M,
                stream=20,
                correlation=200 + k,
                coll_type="all_reduce",
                num_elems=1 << 20,
                dtype="Float",
            ),
        ]
        nid += 10
    for i, t in enumerate((245, 345)):  # orphans
        rows.append(
            kernel(
                90 + i,
                "ncclDevKernel_AllReduce",
                t * M,
                5 * M,
                stream=21,
                correlation=0,
                coll_type="all_reduce",
                num_elems=1 << 20,
                dtype="Float",
            )
        )
    tel = {
        "time_ns": [T0 + i * 10 * M for i in range(41)],
        "device": [0] * 41,
        "power_w": [100.0 + (i % 7) for i in range(41)],
    }
    return make_trace(rows, telemetry=tel)


def test_windows_are_disjoint_and_cover_the_gpu_timeline():
    tr = _lagging_trace()
    w = step_windows(tr, classify(tr.nodes))
    assert w.basis == "gpu" and w.step.tolist() == [1, 2, 3]
    assert (w.start - T0).tolist() == [60 * M, 160 * M, 280 * M]  # first GPU start launched by each step
    assert (w.end - T0).tolist() == [160 * M, 280 * M, 370 * M]  # the next window's start; the last end
    assert any("2 GPU operators (10.000 ms) have no launching CPU call" in n for n in w.notes)


def test_per_step_overlap_adds_up_to_the_trace():
    tr = _lagging_trace()
    r = overlap(tr, per_step=True)
    whole = r.total(0).row(0, named=True)
    st = r.per_rank.filter(pl.col("step").is_not_null()).sort("step")
    assert st["step"].to_list() == [1, 2, 3]
    # spans add up to the traced GPU span (310 ms), not 110 + 110 + 90 ms as by launch time
    assert whole["span_ns"] == 310 * M and st["span_ns"].sum() == 310 * M
    assert st["span_ns"].to_list() == [100 * M, 120 * M, 90 * M]
    starts, ends = st["start_ns"].to_numpy(), st["end_ns"].to_numpy()
    assert np.all(starts[1:] >= ends[:-1])
    # busy, idle, comm and compute partition the whole trace's
    for col in ("busy_ns", "idle_ns", "comm_ns", "compute_ns", "overlap_ns", "n_comm", "n_compute"):
        assert st[col].sum() == whole[col], col
    # idle per step is GPU idle inside the window: [270, 280) in step 2's
    assert whole["idle_ns"] == 10 * M and st["idle_ns"].to_list() == [0, 10 * M, 0]
    assert st["busy_ns"].to_list() == [100 * M, 110 * M, 90 * M]
    # the orphans count where they run (steps 2 and 3), not in step 1
    assert st["n_comm"].to_list() == [1, 2, 2] and st["n_compute"].to_list() == [1, 1, 1]
    assert st["comm_ns"].to_list() == [30 * M, 50 * M, 40 * M]
    assert any("no launching CPU call" in n for n in r.notes)


def test_hta_compat_keeps_the_launch_time_rule():
    tr = _lagging_trace()
    r = overlap(tr, per_step=True, hta_compat=True, hta_keep_last_step=True)
    st = {row["step"]: row for row in r.per_rank.iter_rows(named=True)}
    # by launch time (HTA joins on correlation, 0 included) step 1 holds its GEMM, its
    # all-reduce and both orphans, which match the correlation-0 runtime call: [60, 350)
    assert st[1]["span_ns"] == 290 * M and st[1]["n_comm"] == 3 and st[1]["n_compute"] == 1
    assert st[2]["span_ns"] == 110 * M and st[2]["n_comm"] == 1


def test_bandwidth_energy_and_power_use_the_same_windows():
    tr = _lagging_trace()
    cl = classify(tr.nodes)
    w = step_windows(tr, cl)
    coll, _ = collectives(RankContext(tr, cl))
    got = dict(zip((coll["start_ns"] - T0).to_list(), coll["step"].to_list(), strict=True))
    assert got == {130 * M: 1, 230 * M: 2, 245 * M: 2, 330 * M: 3, 345 * M: 3}
    en = energy(tr, per_step=True)
    by = en.by.filter(pl.col("group") == "step")
    busy = dict(zip(by["key"].to_list(), by["busy_ns"].to_list(), strict=True))
    # operators by the window holding their start: step 1 = GEMM 1 + all-reduce 1, step 2 adds an orphan
    assert busy["1"] == 120 * M and busy["2"] == 125 * M and busy["3"] == 125 * M
    pw = power(tr, per_step=True).per_step.filter(pl.col("step").is_not_null()).sort("step")
    assert pw["start_ns"].to_list() == w.start.tolist() and pw["end_ns"].to_list() == w.end.tolist()


def test_pieces_clip_intervals_to_windows():
    w = StepWindows(np.array([1, 2]), np.array([10, 20]), np.array([20, 30]), "gpu")
    src, k, s, e = w.pieces(np.array([0, 15, 25, 20, 40]), np.array([12, 28, 26, 20, 50]))
    assert src.tolist() == [0, 1, 1, 2, 3]
    assert k.tolist() == [0, 0, 1, 1, 1]
    assert s.tolist() == [10, 15, 20, 25, 20] and e.tolist() == [12, 20, 28, 26, 20]
    assert w.step_of(np.array([9, 10, 29, 30])) == [None, 1, 2, None]


@pytest.mark.parametrize("hta", [False, True])
def test_a100_profile_steps_partition_the_gpu_time(hta, a100_trace):
    r = overlap(a100_trace, per_step=True, hta_compat=hta)
    whole = r.total(0).row(0, named=True)
    st = r.per_rank.filter(pl.col("step").is_not_null())
    if not hta:
        assert st["span_ns"].sum() <= whole["span_ns"]
        assert st["busy_ns"].sum() == whole["busy_ns"]
        assert (st["idle_ns"] >= 0).all()


@pytest.fixture(scope="module")
def a100_trace():
    from charllm_trace import load
    from tests.conftest import shared_trace

    run = load(shared_trace("hta/a100_ddp_nccl_rank0.json.gz"), cache=False)
    return next(iter(run.traces.values()))


def test_analyze_run_uses_one_window_definition():
    from charllm_trace.analysis.api import AnalyzeOptions, analyze_run
    from charllm_trace.core.model import Run

    res = analyze_run(Run.single(_lagging_trace()), AnalyzeOptions(per_step=True, critical_path=False))
    st = res.overlap.per_rank.filter(pl.col("step").is_not_null()).sort("step")
    assert st["span_ns"].sum() == res.overlap.per_rank.filter(pl.col("step").is_null())["span_ns"].item()
    assert st["n_comm"].to_list() == [1, 2, 2]
    assert res.bandwidth.collectives.sort("start_ns")["step"].to_list() == [1, 2, 2, 3, 3]
    pw = res.power.per_step.filter(pl.col("step").is_not_null()).sort("step")
    assert (pw["start_ns"] - st["start_ns"]).to_list() == [0, 0, 0]
    assert (pw["end_ns"] - st["end_ns"]).to_list() == [0, 0, 0]
    assert any("no launching CPU call" in n for n in res.overlap.notes)
