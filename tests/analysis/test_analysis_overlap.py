"""Overlap, interval algebra and classification on synthetic traces with hand-computed answers."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.parallel import groups_of_rank, name_groups, parse_parallel
from charllm_trace.core import intervals as iv
from charllm_trace.core.classify import classify, with_phase
from charllm_trace.core.model import ProcessGroup
from tests.helpers.analysis_helpers import PG0, cpu, kernel, make_trace
from tests.helpers.fuzz_budget import examples

# ---------------------------------------------------------------- intervals


def _brute(intervals: list[tuple[int, int]]) -> set[int]:
    pts: set[int] = set()
    for s, e in intervals:
        pts.update(range(s, e))
    return pts


ivs = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 20)).map(lambda t: (t[0], t[0] + t[1])), max_size=25
)


@settings(max_examples=examples(200), deadline=None)
@given(ivs, ivs, st.integers(0, 80), st.integers(0, 80))
def test_interval_measures_match_brute_force(a, b, w0, w1):
    A = iv.merge([s for s, _ in a], [e for _, e in a])
    B = iv.merge([s for s, _ in b], [e for _, e in b])
    pa, pb = _brute(a), _brute(b)
    assert int((A[1] - A[0]).sum()) == len(pa)
    # merged intervals are sorted and disjoint
    assert np.all(A[0][1:] > A[1][:-1])
    win = set(range(w0, w1))
    assert int(iv.measure_in(*A, [w0], [w1])[0]) == len(pa & win)
    assert int(iv.intersection_in(A, B, [w0], [w1])[0]) == len(pa & pb & win)
    inter = iv.intersect(A, B)
    assert _brute(list(zip(inter[0].tolist(), inter[1].tolist(), strict=True))) == pa & pb


# ---------------------------------------------------------------- classification


def test_classification_nvidia_amd_cpu():
    rows = [
        kernel(1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 0, 10),
        kernel(2, "ncclKernel_AllGather_RING_LL_Sum_int8_t", 0, 10),  # RCCL names its kernels nccl… too
        kernel(3, "void at::native::vectorized_elementwise_kernel<4>", 0, 10),
        kernel(4, "Memcpy DtoD (Device -> Device)", 0, 10, kind="memcpy"),
        kernel(5, "Memset (Device)", 0, 10, kind="memset"),
        kernel(6, "__amd_rocclr_copyBuffer", 0, 10),
        kernel(7, "__amd_rocclr_fillBufferAligned", 0, 10),
        kernel(8, "Stream Sync", 0, 10, kind="other"),
        kernel(9, "ProfilerStep#1", 0, 10, kind="gpu_annotation"),
        cpu(10, "hipMemcpyAsync", 0, 10, kind="runtime"),
        cpu(11, "gloo:all_reduce", 0, 100, coll_type="all_reduce"),
        cpu(12, "aten::copy_", 5, 10, parent=11),
        cpu(13, "aten::mm", 200, 10),
        cpu(14, "aten::linear", 300, 50),
        cpu(15, "aten::addmm", 310, 20, parent=14),
    ]
    c = classify(make_trace(rows).nodes).sort("id")["cls"].to_list()
    assert c == [
        "comm", "comm", "compute", "memcpy", "memset", "memcpy", "memset", "sync", "gpu_range",
        "cpu", "cpu_comm", "cpu_comm", "cpu_compute", "cpu", "cpu_compute",
    ]  # fmt: skip


def test_phase_from_launcher_ancestry():
    rows = [
        cpu(1, "ProfilerStep#1", 0, 1000, kind="annotation"),
        cpu(2, "aten::linear", 10, 50, parent=1),
        cpu(3, "autograd::engine::evaluate_function: MmBackward0", 100, 50),
        cpu(4, "aten::mm", 110, 20, parent=3),
        cpu(5, "Optimizer.step#SGD.step", 200, 50, parent=1),
        cpu(6, "aten::add_", 210, 20, parent=5),
        kernel(7, "gemm", 300, 10, launch_id=2),
        kernel(8, "gemm_bwd", 310, 10, launch_id=4),
        kernel(9, "add", 320, 10, launch_id=6),
        kernel(10, "ncclDevKernel_AllReduce", 330, 10, launch_id=4, coll_type="all_reduce"),
        kernel(11, "orphan", 340, 10),
    ]
    ph = with_phase(make_trace(rows).nodes).filter(pl.col("on_gpu")).sort("id")["phase"].to_list()
    assert ph == ["forward", "backward", "optimizer", "communication", "unknown"]


# ---------------------------------------------------------------- overlap


def _two_stream_trace():
    # compute on stream 7: [0,100) [150,250); comm on streams 20 and 21: [50,180) [170,200)
    # comm union [50,200) = 150; compute ∩ comm = [50,100) + [150,200) = 100
    # memcpy [300,310); busy = [0,250) + [300,310) = 260; span [0,310) = 310 -> idle 50
    return make_trace(
        [
            kernel(1, "gemm", 0, 100),
            kernel(2, "gemm", 150, 100),
            kernel(3, "ncclDevKernel_AllReduce", 50, 130, stream=20, coll_type="all_reduce", pg_name="0"),
            kernel(4, "ncclDevKernel_AllGather", 170, 30, stream=21, coll_type="all_gather", pg_name="1"),
            kernel(5, "Memcpy DtoH", 300, 10, kind="memcpy"),
        ],
        process_groups=(PG0, ProcessGroup(name="1", desc="TENSOR_MODEL_PARALLEL_GROUP", ranks=(0, 1))),
    )


def test_overlap_known_answer():
    r = overlap(_two_stream_trace())
    t = r.total(0).row(0, named=True)
    assert t["comm_ns"] == 150
    assert t["compute_ns"] == 200
    assert t["overlap_ns"] == 100
    assert t["exposed_comm_ns"] == 50
    assert t["memory_ns"] == 10
    assert t["busy_ns"] == 260
    assert t["span_ns"] == 310
    assert t["idle_ns"] == 50
    assert abs(t["overlap_pct"] - 100 * 100 / 150) < 1e-9
    assert r.mode == "gpu"


def test_overlap_per_group_and_dim():
    tr = _two_stream_trace()
    dims = name_groups(tr.meta.process_groups)
    assert dims == {"0": None, "1": "tp"}
    r = overlap(tr, group_dims=dims)
    g = {row["pg_name"]: row for row in r.per_group.filter(pl.col("step").is_null()).iter_rows(named=True)}
    # pg 0: [50,180) ∩ compute = [50,100)+[150,180) = 80 of 130
    assert g["0"]["comm_ns"] == 130 and g["0"]["overlap_ns"] == 80
    # pg 1: [170,200) ∩ compute = [170,200) = 30 of 30
    assert g["1"]["comm_ns"] == 30 and g["1"]["overlap_ns"] == 30 and g["1"]["dim"] == "tp"
    d = r.per_dim.filter(pl.col("step").is_null())
    assert d["dim"].to_list() == ["tp"] and d["comm_ns"].to_list() == [30]


def test_overlap_per_step_by_launch_time():
    # times in µs (U ns) so that HTA's µs rounding keeps them whole
    # step 1 window [0,1000), step 2 [1000,2000); kernels run later than their launch
    U = 1000
    rows = [
        cpu(1, "ProfilerStep#1", 0 * U, 1000 * U, kind="annotation"),
        cpu(2, "ProfilerStep#2", 1000 * U, 1000 * U, kind="annotation"),
        cpu(3, "cudaLaunchKernel", 900 * U, 5 * U, kind="runtime", correlation=11),
        cpu(4, "cudaLaunchKernel", 1100 * U, 5 * U, kind="runtime", correlation=12),
        cpu(5, "cudaLaunchKernel", 1200 * U, 5 * U, kind="runtime", correlation=13),
        kernel(6, "gemm", 1050 * U, 100 * U, correlation=11),  # launched in step 1, runs in step 2's window
        kernel(
            7, "ncclDevKernel_AllReduce", 1100 * U, 200 * U, stream=20, correlation=12, coll_type="all_reduce"
        ),
        kernel(8, "gemm", 1250 * U, 100 * U, correlation=13),
    ]
    # default: GPU windows. Step 1 launched gemm 6 (GPU start 1050), step 2 launched 7 and 8
    # (first GPU start 1100): windows [1050,1100) and [1100,1350); gemm 6 is clipped to them
    r = overlap(make_trace(rows), per_step=True)
    s = {row["step"]: row for row in r.per_rank.iter_rows(named=True)}
    assert (s[1]["start_ns"] - s[None]["start_ns"], s[1]["span_ns"]) == (0, 50 * U)
    assert s[1]["compute_ns"] == 50 * U and s[1]["comm_ns"] == 0 and s[1]["overlap_pct"] is None
    assert s[1]["n_compute"] == 1 and s[2]["n_compute"] == 1  # counted where it starts
    assert s[2]["span_ns"] == 250 * U and s[2]["compute_ns"] == 150 * U and s[2]["idle_ns"] == 0
    assert s[2]["comm_ns"] == 200 * U and s[2]["overlap_ns"] == 100 * U  # [1100,1150) + [1250,1300)
    assert s[None]["overlap_ns"] == (50 + 50) * U  # [1100,1150) + [1250,1300)
    # HTA's rule (launch time) under --hta-compat: step 1 holds all of gemm 6
    h = overlap(make_trace(rows), hta_compat=True, hta_keep_last_step=True, per_step=True)
    hs = {row["step"]: row for row in h.per_rank.iter_rows(named=True)}
    assert hs[1]["compute_ns"] == 100 * U and hs[1]["span_ns"] == 100 * U
    assert hs[2]["comm_ns"] == 200 * U and hs[2]["overlap_ns"] == 50 * U  # [1250,1300)
    # HTA convention drops kernels launched after the last step began (corr 12, 13)
    h = overlap(make_trace(rows), hta_compat=True).total(0).row(0, named=True)
    assert h["comm_ns"] == 0 and h["compute_ns"] == 100 * U
    k = overlap(make_trace(rows), hta_compat=True, hta_keep_last_step=True).total(0).row(0, named=True)
    assert k["overlap_ns"] == 100 * U


def test_overlap_cpu_mode_gloo():
    rows = [
        cpu(1, "gloo:all_reduce", 0, 100, coll_type="all_reduce"),
        cpu(2, "aten::copy_", 10, 20, parent=1),  # inside the collective: communication
        cpu(3, "aten::mm", 50, 100, tid=2),  # another thread: compute overlapping [50,100)
        cpu(4, "aten::add", 300, 10),
    ]
    r = overlap(make_trace(rows))
    t = r.total(0).row(0, named=True)
    assert r.mode == "cpu"
    assert t["comm_ns"] == 100 and t["compute_ns"] == 110 and t["overlap_ns"] == 50
    assert t["span_ns"] == 310 and t["busy_ns"] == 160 and t["idle_ns"] == 150


def test_overlap_empty_trace_is_not_a_crash():
    r = overlap(make_trace([cpu(1, "x", 0, 1, kind="annotation")]))
    assert r.per_rank.height == 0 and r.notes


# ---------------------------------------------------------------- parallel layout


def test_megatron_order_groups():
    lay = parse_parallel("tp=2,pp=2,dp=2")
    g = groups_of_rank(lay, 5)  # 5 = tp 1, dp 0, pp 1
    assert g["tp"] == (4, 5) and g["dp"] == (5, 7) and g["pp"] == (1, 5)
    lay = parse_parallel("tp=2,dp=4,ep=2")
    g = groups_of_rank(lay, 2)  # tp 0, dp 1
    assert g["ep"] == (0, 2) and g["dp"] == (0, 2, 4, 6)
    dims = name_groups(
        [
            ProcessGroup("a", None, (0, 2)),
            ProcessGroup("b", None, (0, 1)),
            ProcessGroup("c", None, (0, 2, 4, 6)),
        ],
        lay,
    )
    assert dims == {"a": "ep", "b": "tp", "c": "dp"}


def test_overlap_survives_absurd_timestamps():
    """One kernel at the epoch and others in 2023 (a corrupt clock): no overflow, no crash."""
    from tests.helpers.analysis_helpers import T0

    rows = [
        kernel(1, "gemm", -T0, 100),  # absolute time 0
        kernel(2, "gemm", 0, 100),
        kernel(3, "ncclDevKernel_AllReduce", 50, 100, stream=20, coll_type="all_reduce", pg_name="0"),
    ] + [cpu(10 + i, f"ProfilerStep#{i}", i * 1000, 1000, kind="annotation") for i in range(3)]
    # 1 + 3 slots of ~1.7e18 ns exceed int64 when stacked: the per-slot path is taken
    r = overlap(make_trace(rows, process_groups=(PG0,)), group_dims={"0": "dp"})
    t = r.total(0).row(0, named=True)
    assert t["comm_ns"] == 100 and t["overlap_ns"] == 50 and t["compute_ns"] == 200
    s0 = r.per_rank.filter(pl.col("step") == 0).row(0, named=True)
    assert s0["comm_ns"] == 100 and s0["overlap_ns"] == 50
    assert r.per_dim.filter(pl.col("step").is_null())["overlap_ns"].to_list() == [50]
