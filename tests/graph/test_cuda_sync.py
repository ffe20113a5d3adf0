"""Kineto ``cuda_sync`` records: kept as ``sync`` nodes with their args, turned into exact
synchronisation edges (charllm_trace.graph.cuda_sync), ignored as activity by the analyses, and
kept through an ET round trip.

The profile is written by hand in the layout Kineto's JSON logger writes (output_json.cpp:
metadata, complete events with their args, ``ac2g`` flow arrows from launch/sync runtime calls
to their GPU records, the profiler's own span, the window end marker).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from charllm_trace.analysis.overlap import overlap
from charllm_trace.converters.build import kineto_trace
from charllm_trace.converters.kineto import parse_kineto, read_kineto
from charllm_trace.core.classify import classify
from charllm_trace.et.writer import write_et
from charllm_trace.graph.cuda_sync import cuda_sync_edges
from charllm_trace.inputs.loader import load

BASE_NS = 1_700_000_000_000_000_000
PID, TID = 4242, 4242  # the training process and its main thread
DEV, CTX = 0, 1
S7, S13 = 7, 13
RUNTIME_CBID = {  # CUPTI runtime callback ids, as Kineto writes them in "cbid"
    "cudaLaunchKernel": 211,
    "cudaEventRecord": 135,
    "cudaEventSynchronize": 137,
    "cudaStreamWaitEvent": 147,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
}
# runtime calls whose CUPTI callback Kineto links to the GPU side with an ac2g arrow
FLOW_CALLS = {"cudaLaunchKernel", "cudaStreamWaitEvent", "cudaStreamSynchronize", "cudaDeviceSynchronize"}


def _x(cat: str, name: str, pid: Any, tid: Any, ts: float, dur: float, args: dict | None = None) -> dict:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args is not None:
        e["args"] = args
    return e


def _flow(ph: str, corr: int, pid: int, tid: int, ts: float) -> dict:
    e: dict[str, Any] = {
        "ph": ph,
        "id": corr,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "cat": "ac2g",
        "name": "ac2g",
    }
    if ph == "f":
        e["bp"] = "e"
    return e


class Profile:
    """Events of one hand-written profile, in the order Kineto writes them (CPU side, then GPU)."""

    def __init__(self) -> None:
        self.cpu: list[dict] = []
        self.gpu: list[dict] = []
        self.flows: list[dict] = []

    def op(self, name: str, ts: float, dur: float, ext: int, cat: str = "cpu_op") -> None:
        self.cpu.append(_x(cat, name, PID, TID, ts, dur, {"External id": ext, "Record function id": 0}))

    def call(self, name: str, ts: float, dur: float, corr: int, ext: int) -> None:
        args = {"External id": ext, "cbid": RUNTIME_CBID[name], "correlation": corr}
        self.cpu.append(_x("cuda_runtime", name, PID, TID, ts, dur, args))
        if name in FLOW_CALLS:
            self.flows.append(_flow("s", corr, PID, TID, ts))

    def kernel(self, name: str, stream: int, ts: float, dur: float, corr: int, ext: int) -> None:
        args = {
            "External id": ext,
            "queued": 0,
            "device": DEV,
            "context": CTX,
            "stream": stream,
            "correlation": corr,
            "registers per thread": 32,
            "shared memory": 0,
            "blocks per SM": 0.5,
            "warps per SM": 2.0,
            "grid": [66, 1, 1],
            "block": [128, 1, 1],
            "est. achieved occupancy %": 6,
        }
        self.gpu.append(_x("kernel", name, DEV, stream, ts, dur, args))
        self.flows.append(_flow("f", corr, DEV, stream, ts))

    def sync(
        self, kind: str, stream: int, ts: float, dur: float, corr: int, ext: int, wait: tuple | None = None
    ) -> None:
        """A cuda_sync record; ``wait``: (stream, cudaEventRecord correlation, event id) of the
        event waited on (Kineto's eventSyncInfo, for "Stream Wait Event" and "Event Sync")."""
        args: dict[str, Any] = {"External id": ext, "cuda_sync_kind": kind}
        if wait is not None:
            args.update(
                wait_on_stream=wait[0],
                wait_on_cuda_event_record_corr_id=wait[1],
                wait_on_cuda_event_id=wait[2],
            )
        args.update(stream=stream, correlation=corr, device=DEV, context=CTX)
        # the tid of a stream -1 record is sanitizeTid(-1) = 1
        self.gpu.append(_x("cuda_sync", kind, DEV, abs(stream), ts, dur, args))
        if kind != "Event Sync":  # cudaEventSynchronize has no ac2g arrow
            self.flows.append(_flow("f", corr, DEV, abs(stream), ts))

    def doc(self, with_sync: bool = True) -> dict:
        gpu = self.gpu if with_sync else [e for e in self.gpu if e["cat"] != "cuda_sync"]
        sync_corr = {e["args"]["correlation"] for e in self.gpu if e["cat"] == "cuda_sync"}
        flows = self.flows if with_sync else [f for f in self.flows if f["id"] not in sync_corr]
        meta = [
            {"name": "process_name", "ph": "M", "ts": 0.0, "pid": PID, "tid": 0, "args": {"name": "python"}},
            {
                "name": "thread_name",
                "ph": "M",
                "ts": 0.0,
                "pid": PID,
                "tid": TID,
                "args": {"name": "thread 4242"},
            },
            {"name": "process_name", "ph": "M", "ts": 0.0, "pid": DEV, "tid": 0, "args": {"name": "python"}},
            {
                "name": "process_labels",
                "ph": "M",
                "ts": 0.0,
                "pid": DEV,
                "tid": 0,
                "args": {"labels": "GPU 0"},
            },
        ] + [
            {
                "name": "thread_name",
                "ph": "M",
                "ts": 0.0,
                "pid": DEV,
                "tid": s,
                "args": {"name": f"stream {s}"},
            }
            for s in (S7, S13)
        ]
        span = {
            "ph": "X",
            "cat": "Trace",
            "ts": 0.0,
            "dur": 200.0,
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        }
        end = {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 200.5}
        return {
            "schemaVersion": 1,
            "deviceProperties": [
                {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045231616, "computeMajor": 9}
            ],
            "cupti_version": 24,
            "cuda_runtime_version": 12040,
            "cuda_driver_version": 12040,
            "trace_id": "0F6E8E4D3C2B4A59",
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_NS,
            "traceEvents": meta + self.cpu + gpu + flows + [span, end],
            "traceName": "rank0.pt.trace.json",
        }


def build_profile() -> Profile:
    """One step on one thread (times in µs from the base):

    - K0 (stream 13) is launched first and queued: it starts on the GPU after the wait call;
    - K1 (stream 7), then ``cudaEventRecord`` on stream 7 (corr 103) and ``cudaStreamWaitEvent``
      of stream 13 on that event (corr 104), then K2 on stream 13: K2 waits for K1;
    - ``cudaEventRecord`` on stream 13 (corr 106) and ``cudaEventSynchronize`` on it (corr 107):
      the CPU waits for K2;
    - K3 (stream 7), K4 (stream 13), ``cudaStreamSynchronize(7)`` (corr 110): waits for K3;
      ``cudaDeviceSynchronize`` (corr 111): waits for K3 and K4.
    """
    p = Profile()
    p.op("ProfilerStep#1", 0.0, 150.0, 1, cat="user_annotation")
    p.op("aten::fill_", 2.0, 8.0, 2)
    p.call("cudaLaunchKernel", 4.0, 4.0, 101, 2)
    p.kernel("fill_kernel", S13, 37.0, 8.0, 101, 2)
    p.op("aten::mm", 12.0, 18.0, 3)
    p.call("cudaLaunchKernel", 14.0, 6.0, 102, 3)
    p.kernel("sm90_xmma_gemm_f32f32_tf32f32", S7, 25.0, 50.0, 102, 3)
    p.call("cudaEventRecord", 32.0, 2.0, 103, 1)
    p.call("cudaStreamWaitEvent", 36.0, 2.0, 104, 1)
    p.sync("Stream Wait Event", S13, 36.5, 0.75, 104, 1, wait=(S7, 103, 1))
    p.op("aten::add", 40.0, 20.0, 4)
    p.call("cudaLaunchKernel", 42.0, 8.0, 105, 4)
    p.kernel("add_kernel", S13, 76.0, 14.0, 105, 4)
    p.call("cudaEventRecord", 62.0, 1.0, 106, 1)
    p.call("cudaEventSynchronize", 65.0, 27.0, 107, 1)
    p.sync("Event Sync", -1, 65.5, 26.0, 107, 1, wait=(S13, 106, 2))
    p.op("aten::mul", 95.0, 6.0, 5)
    p.call("cudaLaunchKernel", 96.0, 4.0, 108, 5)
    p.kernel("mul_kernel", S7, 101.0, 29.0, 108, 5)
    p.call("cudaLaunchKernel", 102.0, 4.0, 109, 1)
    p.kernel("copy_kernel", S13, 107.0, 13.0, 109, 1)
    p.call("cudaStreamSynchronize", 111.0, 20.0, 110, 1)
    p.sync("Stream Sync", S7, 111.5, 19.0, 110, 1)
    p.call("cudaDeviceSynchronize", 132.0, 3.0, 111, 1)
    p.sync("Context Sync", -1, 132.5, 2.0, 111, 1)
    return p


@pytest.fixture(scope="module")
def profile_paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("cuda_sync")
    p = build_profile()
    with_sync, without = d / "with_sync.json", d / "without_sync.json"
    with_sync.write_text(json.dumps(p.doc(with_sync=True), indent=1))
    without.write_text(json.dumps(p.doc(with_sync=False), indent=1))
    return with_sync, without


@pytest.fixture(scope="module")
def trace(profile_paths):
    return kineto_trace(read_kineto(profile_paths[0]))[0]


def _id(nodes: pl.DataFrame, **where: Any) -> int:
    sel = nodes
    for k, v in where.items():
        sel = sel.filter(pl.col(k) == v)
    assert sel.height == 1, where
    return int(sel["id"][0])


def _attrs(nodes: pl.DataFrame, node_id: int) -> dict:
    return orjson.loads(nodes.filter(pl.col("id") == node_id)["attrs"][0])


# ---------------------------------------------------------------------------
# reader
# ---------------------------------------------------------------------------


def test_reader_keeps_sync_records_as_gpu_sync_nodes(trace) -> None:
    n = trace.nodes
    s = n.filter(pl.col("kind") == "sync").sort("start_ns")
    assert s["name"].to_list() == ["Stream Wait Event", "Event Sync", "Stream Sync", "Context Sync"]
    assert s["on_gpu"].to_list() == [True] * 4
    assert s["device"].to_list() == [DEV] * 4
    assert s["stream"].to_list() == [S13, -1, S7, -1]  # the args' stream, not the sanitized tid
    assert s["tid"].null_count() == 4
    assert s["correlation"].to_list() == [104, 107, 110, 111]
    assert s["start_ns"][0] == BASE_NS + 36_500
    wait = _attrs(n, int(s["id"][0]))
    assert wait == {"cat": "cuda_sync", "wait_on_stream": S7, "wait_on_cuda_event_record_corr_id": 103}
    ev = _attrs(n, int(s["id"][1]))
    assert ev["wait_on_stream"] == S13 and ev["wait_on_cuda_event_record_corr_id"] == 106
    assert _attrs(n, int(s["id"][2])) == {"cat": "cuda_sync"}
    # nothing else changed kind: the rest is what the profile without sync records gives
    assert n.filter(pl.col("kind") == "other").height == 0


def test_both_readers_agree_on_sync_records(profile_paths) -> None:
    doc = json.loads(profile_paths[0].read_text())
    a = parse_kineto(doc, profile_paths[0])
    b = read_kineto(profile_paths[0])
    assert a.events.equals(b.events)
    assert a.comm_args == b.comm_args
    sync_rows = a.events.filter(pl.col("cat") == "cuda_sync")["row"].to_list()
    assert sorted(a.comm_args) == sorted(sync_rows[:2])  # the two event syncs carry wait_on_* args


def test_sync_nodes_classify_as_sync(trace) -> None:
    c = classify(trace.nodes).filter(pl.col("kind") == "sync")
    assert c["cls"].to_list() == ["sync"] * 4  # "Stream Wait Event" included (its name has no "Sync")


# ---------------------------------------------------------------------------
# edges
# ---------------------------------------------------------------------------


def test_cuda_sync_edges_are_the_expected_ones(trace) -> None:
    n = trace.nodes
    k = {nm: _id(n, name=nm) for nm in ("fill_kernel", "add_kernel", "mul_kernel", "copy_kernel")}
    gemm = _id(n, name="sm90_xmma_gemm_f32f32_tf32f32")
    ev_sync = _id(n, name="cudaEventSynchronize")
    st_sync = _id(n, name="cudaStreamSynchronize")
    dev_sync = _id(n, name="cudaDeviceSynchronize")
    got = set(cuda_sync_edges(n).iter_rows())
    want = {
        # K1 (recorded on stream 7) -> K2, the first op enqueued on stream 13 after the wait;
        # not K0 (fill_kernel), which starts after the wait call but was enqueued before it
        (gemm, True, k["add_kernel"], False),
        # Event Sync on the event recorded after K2 on stream 13
        (k["add_kernel"], True, ev_sync, True),
        # Stream Sync on stream 7: K3
        (k["mul_kernel"], True, st_sync, True),
        # Context Sync: the last op of each stream of the device
        (k["mul_kernel"], True, dev_sync, True),
        (k["copy_kernel"], True, dev_sync, True),
    }
    assert got == want
    e = cuda_sync_edges(n)
    assert e.schema == pl.Schema(
        {"src": pl.Int64, "src_end": pl.Boolean, "dst": pl.Int64, "dst_end": pl.Boolean}
    )


def test_stream_wait_without_its_call_falls_back_to_gpu_time(trace) -> None:
    n = trace.nodes.filter(pl.col("name") != "cudaStreamWaitEvent")
    gemm = _id(n, name="sm90_xmma_gemm_f32f32_tf32f32")
    # without the wait call, the first op on stream 13 starting at or after the record is K0, which
    # started before K1 ended: the measured times contradict that edge, so it is left out
    assert cuda_sync_edges(n).filter(~pl.col("dst_end")).height == 0
    # without K0 too, the fallback finds K2
    n = n.filter(pl.col("name") != "fill_kernel")
    wait_edges = cuda_sync_edges(n).filter(~pl.col("dst_end"))
    assert wait_edges.rows() == [(gemm, True, _id(n, name="add_kernel"), False)]


def test_event_sync_without_its_record_call_uses_the_waited_stream(trace) -> None:
    n = trace.nodes.filter(~((pl.col("name") == "cudaEventRecord") & (pl.col("correlation") == 106)))
    e = cuda_sync_edges(n).filter(pl.col("dst") == _id(n, name="cudaEventSynchronize"))
    assert e["src"].to_list() == [_id(n, name="add_kernel")]  # last op on stream 13 ending by the sync


def test_contradicted_edges_are_left_out(trace) -> None:
    # K2 moved to start before K1 ends: the wait edge contradicts the measured times
    gemm_end = trace.nodes.filter(pl.col("name") == "sm90_xmma_gemm_f32f32_tf32f32")["start_ns"][0] + 50_000
    n = trace.nodes.with_columns(
        pl.when(pl.col("name") == "add_kernel")
        .then(pl.lit(gemm_end - 1_000, dtype=pl.Int64))
        .otherwise(pl.col("start_ns"))
        .alias("start_ns")
    )
    assert cuda_sync_edges(n).filter(~pl.col("dst_end")).height == 0


def test_no_sync_nodes_no_edges(profile_paths) -> None:
    t = kineto_trace(read_kineto(profile_paths[1]))[0]
    e = cuda_sync_edges(t.nodes)
    assert e.height == 0 and list(e.columns) == ["src", "src_end", "dst", "dst_end"]
    assert cuda_sync_edges(pl.DataFrame({"id": [1]})).height == 0


# ---------------------------------------------------------------------------
# analyses and round trip
# ---------------------------------------------------------------------------


def test_overlap_ignores_sync_records(profile_paths, trace) -> None:
    without = kineto_trace(read_kineto(profile_paths[1]))[0]
    a, b = overlap(trace), overlap(without)
    assert a.mode == b.mode == "gpu"
    assert a.per_rank.height and a.per_rank.equals(b.per_rank)
    assert a.per_group.equals(b.per_group) and a.per_dim.equals(b.per_dim)
    # the non-sync nodes are classified the same
    ca = classify(trace.nodes).filter(pl.col("kind") != "sync").select("name", "start_ns", "cls")
    cb = classify(without.nodes).select("name", "start_ns", "cls")
    assert ca.sort("start_ns", "name").equals(cb.sort("start_ns", "name"))


def test_et_roundtrip_keeps_kind_and_args(profile_paths, tmp_path: Path) -> None:
    run = load(profile_paths[0])
    t = run.traces[0]
    p = tmp_path / "rank-0.et"
    write_et(t, p)
    back = load(p, cache=False).traces[0]
    cols = ["id", "name", "kind", "on_gpu", "device", "stream", "start_ns", "dur_ns", "correlation", "attrs"]
    sel = pl.col("kind") == "sync"
    assert back.nodes.filter(sel).select(cols).sort("id").equals(t.nodes.filter(sel).select(cols).sort("id"))
    assert cuda_sync_edges(back.nodes).sort(pl.all()).equals(cuda_sync_edges(t.nodes).sort(pl.all()))
    assert cuda_sync_edges(back.nodes).height == 5


def test_what_is_ignored_is_counted(trace) -> None:
    """A wait on an event recorded for no op of the trace, and an edge the times contradict, are
    counted for the graph's notes (``points.build``: one note each, with the time they touch)."""
    from charllm_trace.graph.cuda_sync import sync_notes

    tally: dict[str, int] = {}
    cuda_sync_edges(trace.nodes, tally)
    assert tally.get("unrecorded", 0) == 0 and tally.get("contradicting", 0) == 0 and sync_notes(tally) == []
    # without its cudaEventRecord call, the stream wait's event was recorded for no op in the trace
    n = trace.nodes.filter(pl.col("name") != "cudaEventRecord")
    waits = n.filter((pl.col("kind") == "sync") & (pl.col("name") == "Stream Wait Event"))
    tally = {}
    assert cuda_sync_edges(n, tally).filter(~pl.col("dst_end")).height == 0
    assert tally["unrecorded"] == waits.height == 1 and tally["unrecorded_ns"] == int(waits["dur_ns"].sum())
    assert sync_notes(tally)[0].startswith(
        "1 waits on a CUDA event recorded for no op in the trace were ignored"
    )
    # K2 moved to start before K1 ends (test_contradicted_edges_are_left_out): one edge contradicted
    gemm_end = trace.nodes.filter(pl.col("name") == "sm90_xmma_gemm_f32f32_tf32f32")["start_ns"][0] + 50_000
    n = trace.nodes.with_columns(
        pl.when(pl.col("name") == "add_kernel")
        .then(pl.lit(gemm_end - 1_000, dtype=pl.Int64))
        .otherwise(pl.col("start_ns"))
        .alias("start_ns")
    )
    tally = {}
    cuda_sync_edges(n, tally)
    assert tally["contradicting"] >= 1 and "contradict the measured times" in sync_notes(tally)[-1]
