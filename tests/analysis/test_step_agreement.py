"""One step definition for every per-step figure (issue 13): overlap, energy, time breakdown,
FLOP/s and idle time per stream put the same GPU operator in the same step, the GPU-time window
holding its GPU start (analysis/step_windows.py), orphans included; HTA's launch-time steps are
kept only under ``hta_compat``."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from charllm_trace.analysis import AnalyzeOptions, analyze_run
from charllm_trace.analysis.breakdown import time_breakdown
from charllm_trace.analysis.flops import flops
from charllm_trace.analysis.idle_time import idle_time
from charllm_trace.analysis.step_windows import step_windows
from charllm_trace.core.classify import classify
from charllm_trace.core.model import Run
from tests.helpers.analysis_helpers import T0, cpu, kernel, make_trace

M = 1_000_000  # 1 ms in ns
BF = "Tensor(c10::BFloat16)"
MM_FLOP = 2 * 1024 * 1024 * 1024  # aten::mm of 1024x1024 by 1024x1024


def _mm(id: int, start: int, parent: int) -> dict:
    shapes = json.dumps([[1024, 1024], [1024, 1024]])
    io = {"values": None, "shapes": shapes, "types": json.dumps([BF, BF])}
    return cpu(id, "aten::mm", start, 2 * M, parent=parent, inputs=io)


def _lagging() -> object:
    """Three 100 ms ProfilerSteps (tests/analysis/test_step_windows.py's timeline, with aten::mm ops).
    Step k (CPU start s): an aten::mm at s+9 launches a GEMM at s+10 that runs on the GPU at
    [s+60, s+140) ([280, 360) in step 3); an all-reduce launched at s+50 runs at [s+130, s+170).
    Step 1 also launches, at 95 ms, a ``late_gemm`` that runs at [165, 168) on stream 8: in
    step 2's GPU window. Two orphan all-reduces (no launcher) run at [245, 250) and [345, 350).
    GPU windows: #1 [60, 160), #2 [160, 280), #3 [280, 370) ms."""
    rows = [cpu(1, "cudaGetDevice", 1 * M, M, kind="runtime", correlation=0)]
    nid = 10
    for k in range(3):
        s = k * 100 * M
        rows += [
            cpu(nid, f"ProfilerStep#{k + 1}", s, 100 * M, kind="annotation"),
            _mm(nid + 5, s + 9 * M, nid),
            cpu(nid + 1, "cudaLaunchKernel", s + 10 * M, M, kind="runtime", correlation=100 + k, parent=nid + 5),
            cpu(nid + 2, "cudaLaunchKernel", s + 50 * M, M, kind="runtime", correlation=200 + k),
            kernel(nid + 3, "gemm", s + (80 if k == 2 else 60) * M, 80 * M, correlation=100 + k),
            kernel(nid + 4, "ncclDevKernel_AllReduce", s + 130 * M, 40 * M, stream=20, correlation=200 + k,
                   coll_type="all_reduce", num_elems=1 << 20, dtype="Float"),
        ]  # fmt: skip
        nid += 10
    rows += [
        _mm(80, 94 * M, 10),
        cpu(81, "cudaLaunchKernel", 95 * M, M, kind="runtime", correlation=300, parent=80),
        kernel(82, "late_gemm", 165 * M, 3 * M, stream=8, correlation=300),
    ]
    for i, t in enumerate((245, 345)):  # orphans
        rows.append(
            kernel(90 + i, "ncclDevKernel_AllReduce", t * M, 5 * M, stream=21, correlation=0,
                   coll_type="all_reduce", num_elems=1 << 20, dtype="Float")
        )  # fmt: skip
    tel = {
        "time_ns": [T0 + i * 10 * M for i in range(41)],
        "device": [0] * 41,
        "power_w": [100.0 + (i % 7) for i in range(41)],
    }
    return make_trace(rows, telemetry=tel, device_model="NVIDIA H100 80GB HBM3")


def _step_rows(df: pl.DataFrame, col: str, **eq: object) -> dict[int, object]:
    sub = df.filter(pl.col("step").is_not_null())
    for k, v in eq.items():
        sub = sub.filter(pl.col(k).eq_missing(v))
    return dict(zip(sub["step"].to_list(), sub[col].to_list(), strict=True))


def test_every_analysis_puts_a_kernel_in_the_same_step():
    tr = _lagging()
    res = analyze_run(Run.single(tr), AnalyzeOptions(per_step=True, critical_path=False))
    w = step_windows(tr, classify(tr.nodes))
    assert w.step.tolist() == [1, 2, 3]
    assert (w.start - T0).tolist() == [60 * M, 160 * M, 280 * M]
    assert (w.end - T0).tolist() == [160 * M, 280 * M, 370 * M]
    # late_gemm, launched in ProfilerStep 1, starts at 165 ms on the GPU: step 2 in every analysis
    ov = res.overlap.per_rank.filter(pl.col("step").is_not_null()).sort("step")
    assert ov["n_compute"].to_list() == [1, 2, 1]  # and the orphans: step 2 and 3
    assert ov["n_comm"].to_list() == [1, 2, 2]
    bd = res.breakdown.by
    assert _step_rows(bd, "count", group="kernel", key="late_gemm", rank=0) == {2: 1}
    assert _step_rows(bd, "count", group="category", key="communication", rank=0) == {1: 1, 2: 2, 3: 2}
    idle = res.idle_time.streams
    assert _step_rows(idle, "n_ops", stream=8) == {2: 1}
    assert _step_rows(idle, "n_ops", stream=21) == {2: 1, 3: 1}  # the orphans
    fl = res.flops.per_step.filter(pl.col("op_class") == "all")
    assert _step_rows(fl, "n_ops") == {1: 1, 2: 2, 3: 1}  # the late aten::mm by its kernel: step 2
    assert _step_rows(fl, "flop") == {1: MM_FLOP, 2: 2 * MM_FLOP, 3: MM_FLOP}
    assert _step_rows(fl, "wall_ns") == {1: 100 * M, 2: 120 * M, 3: 90 * M}  # the windows
    en = res.energy.by.filter((pl.col("group") == "step") & (pl.col("key") != "(idle)"))
    busy = dict(zip(en["key"].to_list(), en["busy_ns"].to_list(), strict=True))
    assert busy == {"1": 120 * M, "2": 128 * M, "3": 125 * M}  # 2: gemm, all-reduce, late, orphan
    # the launch statistics' step rows: the same windows
    ls = res.launch.stats.filter(pl.col("device").is_null() & pl.col("step").is_not_null()).sort("step")
    assert (ls["window_start_ns"] - T0).to_list() == [60 * M, 160 * M, 280 * M]


def test_breakdown_gpu_time_per_step_is_the_gpu_time_in_each_window():
    tr = _lagging()
    w = step_windows(tr, classify(tr.nodes))
    gpu = tr.nodes.filter(pl.col("on_gpu").fill_null(False))
    idx = w.index_of(gpu["start_ns"].to_numpy())
    want = {int(w.step[k]): int(gpu["dur_ns"].to_numpy()[idx == k].sum()) for k in range(w.n)}
    assert want == {1: 120 * M, 2: 128 * M, 3: 125 * M}
    tot = time_breakdown(tr).totals
    got = _step_rows(tot, "gpu_time_ns")
    assert got == want
    assert sum(got.values()) == tot.filter(pl.col("step").is_null())["gpu_time_ns"].item()
    # standalone calls (no windows passed) compute the same windows
    assert _step_rows(flops(tr, per_step=True).per_step.filter(pl.col("op_class") == "all"), "n_ops") == {
        1: 1,
        2: 2,
        3: 1,
    }
    assert _step_rows(idle_time(tr).streams, "n_ops", stream=8) == {2: 1}


def test_hta_compat_keeps_the_launch_time_steps():
    tr = _lagging()
    opts = AnalyzeOptions(per_step=True, critical_path=False, hta_compat=True, hta_keep_last_step=True)
    res = analyze_run(Run.single(tr), opts)
    # HTA: late_gemm belongs to ProfilerStep 1, where it was launched
    assert _step_rows(res.breakdown.by, "count", group="kernel", key="late_gemm", rank=0) == {1: 1}
    assert _step_rows(res.idle_time.streams, "n_ops", stream=8) == {1: 1}
    starts = res.launch.stats.filter(pl.col("device").is_null() & pl.col("step").is_not_null()).sort("step")
    assert (starts["window_start_ns"] - T0).to_list() == [0, 100 * M, 200 * M]  # the ProfilerSteps
    assert np.all(starts["step"].to_numpy() == [1, 2, 3])
