"""`export perfetto` writes what Perfetto reads as the trace is (issue 14 item 4).

- slices nest on every track: a partial overlap (the host ET's ``[pytorch|profiler|execution_trace|
  thread]`` container straddling ``gloo:all_gather`` on the collected run; recorded overlaps in
  real profiles; overlapping ops of a simulated timeline) goes, with its exact times, to an
  overlap track beside its thread or stream;
- launch arrows start at the begin of the launch call (the ``cudaLaunchKernel``/``hipLaunch...``
  runtime call) and end on the GPU op, never on a ``gpu_user_annotation`` range, never backwards;
- the strict checker (tests/helpers/perfetto_check.py, which replays Perfetto's import) passes on every
  shared trace and on the collected run, and catches each fault it is there for;
- ``export perfetto`` on an ET without timestamps says that ``--simulate`` draws it.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.core.model import Run, Trace, TraceMeta
from charllm_trace.exports.perfetto import write_chrome_trace
from charllm_trace.exports.perfetto_layout import nest_lanes
from charllm_trace.inputs import loader
from tests.conftest import FIXTURES, shared_trace
from tests.helpers import perfetto_check as pc

#: every shared trace (relative to ../shared/traces), and whether it needs --simulate
SHARED = [
    ("hta/a100_ddp_nccl_rank0.json.gz", False),
    ("hta/trace_filter_2ranks", False),
    ("hta/mi250_minitoy_kineto.json.gz", False),
    ("hta/simple_add_kineto.json.gz", False),
    ("hta/simple_add_host_et.json.gz", True),
    ("param/dlrm_8ranks_v100", False),
    ("param/resnet_kineto.json.gz", False),
    ("param/resnet_host_et.json.gz", True),
    ("tracelens/h100_qwen1.5-0.5b_inference.json.gz", False),
    ("tracelens/mi300_qwen1.5-0.5b_inference.json.gz", False),
    ("chakra/feeder_tests_chakra.0.et", True),
]
GLOO = FIXTURES / "cpu-2rank-gloo"


def _export(src: Path, out: Path, *extra: str) -> str:
    r = CliRunner().invoke(main, ["export", "perfetto", str(src), "-o", str(out), *extra])
    assert r.exit_code == 0, r.output
    return r.output


def _counts(output: str) -> dict[str, int]:
    first = output.splitlines()[0]  # "wrote OUT: N ranks, N tracks, N slices, ..."
    return {k: int(v) for v, k in re.findall(r"(\d+) (slices|launch flows|critical-path segments)", first)}


@pytest.mark.parametrize(("rel", "simulate"), SHARED, ids=[r for r, _ in SHARED])
def test_checker_passes_on_every_shared_trace(rel: str, simulate: bool, tmp_path: Path) -> None:
    src = shared_trace(rel)
    out = tmp_path / "t.json.gz"
    output = _export(src, out, *(["--simulate"] if simulate else []))
    res = pc.assert_valid(out)
    n = _counts(output)
    assert res.slices == n["slices"] + n.get("critical-path segments", 0) > 0
    assert res.flows == n["launch flows"]


def test_checker_passes_on_the_collected_run(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    output = _export(GLOO, out)
    res = pc.assert_valid(out)
    n = _counts(output)
    assert res.slices == n["slices"] + n["critical-path segments"]
    # the container that straddled gloo:all_gather on rank 1 is on an overlap track, times exact
    assert "1 slice partially overlaps another on its thread or stream" in output
    doc = pc.load(out)
    events = doc["traceEvents"]
    origin = int(doc["otherData"]["origin_unix_ns"])
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    moved = [e for e in events if e["ph"] == "X" and tnames[(e["pid"], e["tid"])].endswith("(overlaps)")]
    assert len(moved) == 1
    (m,) = moved
    node = loader.load(GLOO).traces[m["pid"]].nodes.filter(pl.col("id") == m["args"]["id"]).row(0, named=True)
    assert m["name"] == node["name"] == "[pytorch|profiler|execution_trace|thread]"
    assert tnames[(m["pid"], m["tid"])] == f"CPU thread {node['tid']} (overlaps)"
    assert origin + pc._ns(m["ts"]) == node["start_ns"] and pc._ns(m["dur"]) == node["dur_ns"]
    # the op it straddled stays on the thread's own track
    ag = [
        e
        for e in events
        if e["ph"] == "X" and e["name"] == "gloo:all_gather" and e["pid"] == m["pid"] and e["ts"] < m["ts"]
    ]
    assert ag and all(tnames[(e["pid"], e["tid"])] == f"CPU thread {node['tid']}" for e in ag)


def test_a100_launch_flows_start_at_the_runtime_call(tmp_path: Path) -> None:
    src = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    out = tmp_path / "t.json"
    stats = write_chrome_trace(loader.load(src), out)
    res = pc.assert_valid(out)
    # one arrow per kernel, memcpy and memset (3,774); none to the 30 gpu_user_annotation ranges
    assert stats.flows == res.flows == 2700 + 960 + 114
    assert stats.flows_backwards == stats.flows_unbound == 0
    for s_ns, ss, f_ns, fs in res.flow_slices:
        assert ss["cat"] == "runtime" and ss["name"].startswith("cuda")
        assert s_ns == ss["_ts"]  # at the begin of the launch call, not the middle of the op
        assert fs["cat"] in pc.GPU_OP_KINDS and f_ns == fs["_ts"] >= s_ns
        assert ss["args"]["correlation"] == fs["args"]["correlation"]


# ---- the layout rule, on small cases ---------------------------------------------------------


def test_nest_lanes_moves_only_the_slice_that_overlaps() -> None:
    # one track: A [0,100] holds B [10,20]; C [90,150] starts inside A and ends after it;
    # D [120,130] inside C; E [200,300] alone
    start = np.array([0, 10, 90, 120, 200])
    end = np.array([100, 20, 150, 130, 300])
    assert nest_lanes(np.zeros(5, np.int64), start, end).tolist() == [0, 0, 1, 0, 0]
    # the same slices on two tracks never interact
    assert nest_lanes(np.array([0, 0, 1, 1, 0]), start, end).tolist() == [0, 0, 0, 0, 0]
    # a chain where each overlaps the next: two lanes are enough
    s = np.arange(0, 100, 10)
    assert nest_lanes(np.zeros(10, np.int64), s, s + 15).tolist() == [0, 1] * 5
    # touching ends and zero-length slices are not overlaps
    s = np.array([0, 10, 10, 10])
    e = np.array([10, 20, 10, 10])
    assert nest_lanes(np.zeros(4, np.int64), s, e).tolist() == [0, 0, 0, 0]


def _gpu_trace(rows: list[dict]) -> Trace:
    return Trace(nodes=pl.DataFrame(rows, infer_schema_length=None), meta=TraceMeta(rank=0, world_size=1))


def _rt(i: int, start: int, dur: int, corr: int, **kw: object) -> dict:
    return dict(
        id=i,
        name="cudaLaunchKernel",
        kind="runtime",
        on_gpu=False,
        tid=1,
        start_ns=start,
        dur_ns=dur,
        correlation=corr,
        **kw,
    )


def _k(i: int, start: int, dur: int, corr: int, launch: int, kind: str = "kernel", **kw: object) -> dict:
    return dict(
        id=i,
        name=f"k{i}",
        kind=kind,
        on_gpu=True,
        device=0,
        stream=7,
        start_ns=start,
        dur_ns=dur,
        correlation=corr,
        launch_id=launch,
        **kw,
    )


def test_flows_are_bound_or_left_out(tmp_path: Path) -> None:
    op = dict(id=1, name="aten::mm", kind="cpu_op", on_gpu=False, tid=1, start_ns=1_000, dur_ns=10_000)
    rows = [
        op,
        _rt(2, 2_000, 1_000, 100, parent=1),  # launches k10 at 5_000: bound
        _rt(3, 4_000, 1_000, 101, parent=1),  # launches k11, which begins before it: backwards
        _rt(4, 6_000, 1_000, 102, parent=1),  # a shorter slice begins with it: unbound
        dict(id=5, name="cudaGetLastError", kind="runtime", on_gpu=False, tid=1, start_ns=6_000, dur_ns=10),
        dict(
            id=9,
            name="range",
            kind="gpu_annotation",
            on_gpu=True,
            device=0,
            stream=7,
            start_ns=4_000,
            dur_ns=20_000,
            launch_id=1,
        ),
        _k(10, 5_000, 500, 100, 1),
        _k(11, 3_000, 500, 101, 1),
        _k(12, 8_000, 500, 102, 1, kind="memcpy"),
        _k(13, 9_000, 500, None, 1, kind="memset"),  # no runtime call: from its launching op
    ]
    out = tmp_path / "t.json"
    stats = write_chrome_trace(Run.single(_gpu_trace(rows), source="x"), out)
    assert (stats.flows, stats.flows_backwards, stats.flows_unbound) == (2, 1, 1)
    res = pc.assert_valid(out)
    got = sorted((ss["args"]["id"], fs["args"]["id"]) for _, ss, _, fs in res.flow_slices)
    assert got == [(1, 13), (2, 10)]  # never to the gpu_annotation range 9


def test_partial_overlap_on_a_gpu_stream_keeps_every_slice(tmp_path: Path) -> None:
    rows = [
        _rt(1, 0, 100, 1),
        _rt(2, 200, 100, 2),
        dict(
            id=9,
            name="range",
            kind="gpu_annotation",
            on_gpu=True,
            device=0,
            stream=7,
            start_ns=1_000,
            dur_ns=1_500,
        ),
        _k(10, 900, 300, 1, None),  # ends inside the range that begins after it: the range moves
        _k(11, 2_000, 1_000, 2, None),  # begins inside the range, ends after it
    ]
    out = tmp_path / "t.json"
    stats = write_chrome_trace(Run.single(_gpu_trace(rows), source="x"), out)
    res = pc.assert_valid(out)
    assert stats.overlap_slices == 1 and stats.slices == 5 and res.flows == stats.flows == 2
    doc = pc.load(out)
    tnames = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    where = {e["name"]: tnames[e["tid"]] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert where == {
        "cudaLaunchKernel": "CPU thread 1",
        "range": "GPU 0 stream 7 (overlaps)",
        "k10": "GPU 0 stream 7",
        "k11": "GPU 0 stream 7",
    }


# ---- the checker catches what it is there for --------------------------------------------------


def _doc(*events: dict) -> dict:
    meta = [
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "CPU thread 1"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 2, "args": {"name": "GPU 0 stream 7"}},
    ]
    return {"traceEvents": meta + list(events)}


def _x(name: str, tid: int, ts: str, dur: str, cat: str = "cpu_op", **args: object) -> dict:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": 0,
        "tid": tid,
        "ts": Decimal(ts),
        "dur": Decimal(dur),
        "args": args,
    }


def _flow(ph: str, tid: int, ts: str, fid: int = 1) -> dict:
    e = {"name": "launch", "cat": "launch", "ph": ph, "pid": 0, "tid": tid, "ts": Decimal(ts), "id": fid}
    if ph == "f":
        e["bp"] = "e"
    return e


def test_checker_catches_each_fault() -> None:
    rt = _x("cudaLaunchKernel", 1, "1.000", "1.000", cat="runtime", id=2, correlation=7)
    k = _x("k", 2, "3.000", "1.000", cat="kernel", id=3, correlation=7, launch_id=1)
    assert not pc.check(_doc(rt, k, _flow("s", 1, "1.000"), _flow("f", 2, "3.000"))).problems
    # a partial overlap
    p = pc.check(_doc(_x("a", 1, "0", "2.000"), _x("b", 1, "1.000", "2.000"))).problems
    assert len(p) == 1 and p[0].startswith("partial overlap")
    # a flow start after its slice ended binds to that (stale) slice: reported
    p = pc.check(_doc(rt, k, _flow("s", 1, "2.500"), _flow("f", 2, "3.000"))).problems
    assert any("does not contain it" in x for x in p)
    # a backwards arrow
    k0 = _x("k", 2, "0.500", "0.200", cat="kernel", id=3, correlation=7, launch_id=1)
    p = pc.check(_doc(rt, k0, _flow("s", 1, "1.000"), _flow("f", 2, "0.500"))).problems
    assert any("runs backwards" in x for x in p)
    # an arrow to an annotation range
    ann = _x("range", 2, "2.900", "2.000", cat="gpu_annotation", id=4, launch_id=1)
    p = pc.check(_doc(rt, ann, _flow("s", 1, "1.000"), _flow("f", 2, "3.000"))).problems
    assert any("not a GPU op" in x for x in p)
    # an arrow from a call that did not launch the op
    other = _x("cudaMemsetAsync", 1, "1.000", "1.000", cat="runtime", id=2, correlation=8)
    p = pc.check(_doc(other, k, _flow("s", 1, "1.000"), _flow("f", 2, "3.000"))).problems
    assert any("correlation" in x for x in p)
    # a counter going back in time, a non-numeric value, a sub-ns time
    c1 = {"name": "GPU0 power", "ph": "C", "pid": 0, "ts": Decimal("2.000"), "args": {"W": 300}}
    c2 = {"name": "GPU0 power", "ph": "C", "pid": 0, "ts": Decimal("1.000"), "args": {"W": "300"}}
    c3 = {"name": "GPU0 power", "ph": "C", "pid": 0, "ts": Decimal("3.0001"), "args": {"W": 1}}
    p = pc.check(_doc(c1, c2, c3)).problems
    assert any("goes back in time" in x for x in p)
    assert any("not a finite number" in x for x in p)
    assert any("whole number of ns" in x for x in p)


def test_old_flow_placement_fails_the_checker(tmp_path: Path) -> None:
    """Mid-op flow starts (the old export) bind to a stale slice; the checker says so."""
    src = shared_trace("hta/mi250_minitoy_kineto.json.gz")
    out = tmp_path / "t.json"
    write_chrome_trace(loader.load(src), out)
    doc = pc.load(out)
    assert not pc.check(doc).problems
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    assert starts
    for e in starts.values():
        e["ts"] += Decimal("1000.000")  # 1 ms later: past the end of the launch call
    assert any("does not contain it" in x or "runs backwards" in x for x in pc.check(doc).problems)


# ---- the message -----------------------------------------------------------------------------


def test_no_timestamps_says_simulate(tmp_path: Path) -> None:
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    r = CliRunner().invoke(main, ["export", "perfetto", str(src), "-o", str(tmp_path / "o.json")])
    assert r.exit_code == 2
    line = r.output.strip()
    assert "\n" not in line and line.startswith(f"error: {src}: no timestamps")
    assert "--simulate" in line
    assert not (tmp_path / "o.json").exists()
