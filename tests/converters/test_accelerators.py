"""Accelerators other than CUDA and ROCm (issue 13, item 5): device activity that Kineto records
under a category of the accelerator's own, with ``args.stream``, on a device process named by the
profile's metadata (or with ``args.device``), is device activity; HCCL collectives are
collectives.

The profiles are built here with the shape of the one that was analysed in "CPU mode" (device
events typed ``other``, ``devices: []``, ``hccl:*`` collectives not found).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from charllm_trace.analysis import analyze_run
from charllm_trace.converters import kineto_native, kineto_stream
from charllm_trace.converters.kineto import parse_kineto, read_kineto
from charllm_trace.core.classify import classify
from charllm_trace.core.model import Run
from charllm_trace.et.summary import run_summary
from tests.helpers.kineto_builder import trace_of, x

CPU, DEV = 4242, 2  # pids: the host process and the device process


def _x(name: str, cat: str, ts: float, dur: float, pid: int = CPU, tid: int = 1, **args: Any) -> dict:
    return x(name, cat, ts, dur, pid, tid, **args)


def _meta(record: str, pid: int, **args: Any) -> dict:
    return {"ph": "M", "name": record, "pid": pid, "tid": 0, "args": args}


def npu_doc(with_metadata: bool = True, device_arg: bool = False) -> dict:
    """One step on an accelerator whose device activity Kineto writes under ``npu_op``: a matmul,
    an all_gather under ``c10d::allgather_`` > ``hccl:allgather``, an all_reduce under
    ``hccl:all_reduce`` overlapped by an add on another stream, and an ``hccl:all_to_all`` whose
    device activity is not in the profile."""
    rt = "privateuse1_runtime"
    dev: dict[str, Any] = {"device": 0} if device_arg else {}

    def k(name: str, ts: float, dur: float, stream: int, corr: int) -> dict:
        return _x(name, "npu_op", ts, dur, pid=DEV, tid=stream, stream=stream, correlation=corr, **dev)

    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 1000),
        _x("aten::mm", "cpu_op", 10, 40),
        _x("aclnnMatmul", rt, 15, 10, correlation=1),
        k("MatMul_AIC_kernel", 30, 100, 5, 1),
        _x("c10d::allgather_", "cpu_op", 200, 200),
        _x("hccl:allgather", "cpu_op", 210, 180),
        _x("HcclAllGather", rt, 220, 10, correlation=2),
        k("hcclAllGather_Ring_kernel", 250, 100, 9, 2),
        _x("hccl:all_reduce", "cpu_op", 500, 100),
        _x("HcclAllReduce", rt, 505, 10, correlation=3),
        k("hcclAllReduce_AIV_kernel", 520, 60, 9, 3),
        _x("aten::add", "cpu_op", 505, 10, tid=2),
        _x("aclnnAdd", rt, 507, 5, tid=2, correlation=4),
        k("Add_AIV_kernel", 530, 40, 5, 4),
        _x("hccl:all_to_all", "cpu_op", 700, 50),
        _x("aclrtMemcpyAsync", rt, 760, 5, correlation=5),
        k("MemcpyAsync_HtoD", 770, 10, 5, 5),
        # an unknown category on the host process, with a stream: not device activity
        _x("host_queue_event", "npu_queue", 800, 5, stream=5),
    ]
    if with_metadata:
        ev = [
            _meta("process_name", CPU, name="python3.10"),
            _meta("process_labels", CPU, labels="CPU"),
            _meta("process_name", DEV, name="python3.10"),
            _meta("process_labels", DEV, labels="NPU 0"),
            *ev,
        ]
    return {"traceEvents": ev, "distributedInfo": {"rank": 0, "world_size": 2, "backend": "hccl"}}


@pytest.fixture(params=["native", "msgspec", "plain"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    def read(doc: dict, tmp_path: Path):
        p = tmp_path / "npu.json"
        p.write_text(json.dumps(doc))
        if request.param == "plain":
            return parse_kineto(doc, p)
        if request.param == "msgspec":
            monkeypatch.setattr(kineto_native, "decoder", lambda: None)
        return read_kineto(p)

    return read


DEVICE_NAMES = [
    "MatMul_AIC_kernel",
    "hcclAllGather_Ring_kernel",
    "hcclAllReduce_AIV_kernel",
    "Add_AIV_kernel",
    "MemcpyAsync_HtoD",
]


@pytest.mark.parametrize("shape", ["metadata", "device_arg"])
def test_device_events_of_an_unknown_category_are_device_kernels(reader, tmp_path: Path, shape: str) -> None:
    doc = npu_doc(with_metadata=shape == "metadata", device_arg=shape == "device_arg")
    prof = reader(doc, tmp_path)
    ev = prof.events.sort("start_ns")
    dev = ev.filter(pl.col("cat") == "npu_op")
    assert dev["name"].to_list() == DEVICE_NAMES
    assert dev["kind"].to_list() == ["kernel"] * 4 + ["memcpy"]  # was "other"
    assert dev["on_gpu"].to_list() == [True] * 5
    assert dev["device"].to_list() == ([DEV] * 5 if shape == "metadata" else [0] * 5)
    assert dev["stream"].to_list() == [5, 9, 9, 5, 5]
    assert dev["tid"].null_count() == 5
    host = ev.filter(pl.col("cat") == "npu_queue")
    assert host["kind"].to_list() == ["other"] and host["on_gpu"].to_list() == [False]
    assert prof.device_labels == ({DEV: "NPU 0"} if shape == "metadata" else {})


def test_the_three_readers_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = npu_doc()
    p = tmp_path / "npu.json"
    p.write_text(json.dumps(doc, indent=1))
    monkeypatch.setattr(kineto_stream, "BATCH", 3)  # the metadata records in two batches
    fast = read_kineto(p)
    plain = parse_kineto(doc, p)
    monkeypatch.setattr(kineto_native, "decoder", lambda: None)
    slow = read_kineto(p)
    for other in (plain, slow):
        assert fast.events.equals(other.events, null_equal=True)
        assert fast.comm_args == other.comm_args
        assert fast.device_labels == other.device_labels == {DEV: "NPU 0"}


def _trace(doc: dict, tmp_path: Path):
    return trace_of(tmp_path / "npu.json", doc)


def test_hccl_collectives_are_typed(tmp_path: Path) -> None:
    t = _trace(npu_doc(), tmp_path)
    n = t.nodes
    comm = n.filter(pl.col("node_type").str.starts_with("COMM")).sort("start_ns")
    # the device kernels are the collectives; hccl:all_to_all, with no device kernel, is one itself
    assert comm["name"].to_list() == [
        "hcclAllGather_Ring_kernel",
        "hcclAllReduce_AIV_kernel",
        "hccl:all_to_all",
    ]
    assert comm["coll_type"].to_list() == ["all_gather", "all_reduce", "all_to_all"]
    # the hccl: ops that launched a device kernel are its annotations, not second collectives
    ann = n.filter(pl.col("name").is_in(["hccl:allgather", "hccl:all_reduce"]))
    assert ann["node_type"].to_list() == ["COMP", "COMP"]
    cls = dict(classify(n).select("name", "cls").iter_rows())
    assert cls["hcclAllGather_Ring_kernel"] == cls["hcclAllReduce_AIV_kernel"] == "comm"
    assert cls["MatMul_AIC_kernel"] == cls["Add_AIV_kernel"] == "compute"
    assert cls["hccl:all_to_all"] == cls["hccl:allgather"] == "cpu_comm"
    assert cls["MemcpyAsync_HtoD"] == "memcpy"
    launcher = dict(n.select("id", "name").iter_rows())
    copy = n.filter(pl.col("name") == "MemcpyAsync_HtoD").row(0, named=True)
    # linked to its runtime call by correlation: launch_id is the op around that call
    rt = n.filter(pl.col("correlation") == copy["correlation"]).filter(~pl.col("on_gpu"))
    assert rt["name"].to_list() == ["aclrtMemcpyAsync"]
    assert launcher[copy["launch_id"]] == "ProfilerStep#1"


def test_overlap_in_gpu_mode_and_devices_listed(tmp_path: Path) -> None:
    t = _trace(npu_doc(), tmp_path)
    res = analyze_run(Run.single(t))
    assert res.overlap is not None and res.overlap.mode == "gpu"  # was "cpu"
    row = res.overlap.per_rank.filter(pl.col("step").is_null()).row(0, named=True)
    assert row["compute_ns"] == (100 + 40) * 1000  # MatMul + Add (µs -> ns)
    assert row["comm_ns"] == (100 + 60) * 1000  # all_gather + all_reduce kernels
    assert row["overlap_ns"] == 40 * 1000  # the Add runs inside the all_reduce
    assert row["memory_ns"] == 10 * 1000  # the copy
    assert res.bandwidth is not None
    assert sorted(res.bandwidth.collectives["coll_type"].to_list()) == ["all_gather", "all_reduce"]
    s = run_summary(Run.single(t))
    assert s["devices"] == ["NPU 0 (model unknown)"]  # was []
    assert {c["coll_type"] for c in s["collectives"]} == {"all_gather", "all_reduce", "all_to_all"}
    assert t.meta.device_index == DEV


def test_a_cuda_profile_keeps_its_kinds(tmp_path: Path) -> None:
    """The rule touches only categories we do not list: CUDA runtime calls with a stream arg stay
    runtime calls."""
    doc = {
        "traceEvents": [
            _meta("process_labels", 0, labels="GPU 0"),
            _x("cudaLaunchKernel", "cuda_runtime", 0, 5, correlation=1, stream=7, device=0),
            _x("gemm", "kernel", 10, 5, pid=0, tid=7, stream=7, device=0, correlation=1),
        ]
    }
    p = tmp_path / "cuda.json"
    p.write_text(json.dumps(doc))
    ev = read_kineto(p).events.sort("start_ns")
    assert ev["kind"].to_list() == ["runtime", "kernel"]
    assert ev["on_gpu"].to_list() == [False, True]
