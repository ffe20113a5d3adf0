"""`charllm-trace export perfetto`: the Chrome-trace JSON of a Run.

Two independent checks of the written file:
- Perfetto's own trace processor (the `perfetto` PyPI package) loads it and we query
  slices, counters, flows, processes and threads back. The package fetches the
  trace_processor_shell binary on first use; where that cannot be had (no network,
  no $PERFETTO_TRACE_PROCESSOR) that test is skipped and says so.
- Offline: a strict reading of the Chrome Trace Event Format with exact decimals,
  rebuilding every slice and counter sample and comparing them with the model, and
  checking that slices nest on every track (Perfetto drops mis-nested slices).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.core.model import ProcessGroup, Run, Trace, TraceMeta
from charllm_trace.exports.perfetto import COUNTERS, write_chrome_trace
from charllm_trace.inputs import loader
from tests.helpers import perfetto_check

T0 = 1_763_700_000_123_456_789  # a Unix-epoch ns with every digit significant


def _rank_trace(rank: int, n_steps: int = 3) -> Trace:
    """A small but realistic rank: steps, CPU ops, kernels on two streams, collectives, telemetry."""
    rows = []
    nid = 0
    t = T0 + rank * 777  # ranks not aligned, odd ns everywhere
    for step in range(n_steps):
        nid += 1
        step_id = nid
        step_start = t
        rows.append(
            dict(
                id=nid,
                name=f"ProfilerStep#{step}",
                kind="annotation",
                node_type="COMP",
                on_gpu=False,
                tid=1001,
                start_ns=t,
                dur_ns=90_001,
            )
        )
        for k in range(4):
            nid += 1
            op = nid
            rows.append(
                dict(
                    id=op,
                    name="aten::mm",
                    kind="cpu_op",
                    node_type="COMP",
                    on_gpu=False,
                    tid=1001,
                    start_ns=t + 11 + k * 20_003,
                    dur_ns=10_007,
                    parent=step_id,
                )
            )
            nid += 1
            rows.append(
                dict(
                    id=nid,
                    name='sm90_xmma_gemm_"bf16"\\n',
                    kind="kernel",
                    node_type="COMP",
                    on_gpu=True,
                    device=rank % 2,
                    stream=7,
                    start_ns=t + 5_013 + k * 20_003,
                    dur_ns=12_345,
                    launch_id=op,
                    correlation=op * 10,
                )
            )
            nid += 1
            rows.append(
                dict(
                    id=nid,
                    name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                    kind="kernel",
                    node_type="COMM_COLL",
                    on_gpu=True,
                    device=rank % 2,
                    stream=20,
                    start_ns=t + 9_001 + k * 20_003,
                    dur_ns=7_777,
                    coll_type="all_reduce",
                    comm_bytes=1 << (10 + k),
                    pg_name="0",
                    coll_seq=step * 4 + k,
                    launch_id=op,
                )
            )
        # a backward thread
        nid += 1
        rows.append(
            dict(
                id=nid,
                name="autograd::engine",
                kind="cpu_op",
                node_type="COMP",
                on_gpu=False,
                tid=2002,
                start_ns=step_start + 40_000,
                dur_ns=30_000,
            )
        )
        t += 100_003
    # one node without a start time (cannot be placed)
    nid += 1
    rows.append(dict(id=nid, name="untimed", kind="cpu_op", node_type="COMP", on_gpu=False, tid=1001))
    nodes = pl.DataFrame(rows, infer_schema_length=None)
    ts = [T0 - 3_000 + i * 10_001 for i in range(35)]
    tel = pl.DataFrame(
        {
            "time_ns": ts,
            "device": [rank % 2] * len(ts),
            "power_w": [300.0 + 7.25 * i for i in range(len(ts))],
            "temp_c": [55.0 + (i % 5) for i in range(len(ts))],
            "mem_temp_c": [None] * len(ts),  # absent sensor: no counter samples
            "sm_clock_mhz": [1980.0 - (i % 3) * 15 for i in range(len(ts))],
            "mem_clock_mhz": [2619.0] * (len(ts) - 1) + [float("nan")],  # NaN is not a sample
        }
    )
    meta = TraceMeta(
        rank=rank,
        world_size=2,
        device_model="NVIDIA H100 80GB HBM3",
        process_groups=(ProcessGroup("0", "default_pg", (0, 1)),),
    )
    return Trace(nodes=nodes, telemetry=tel, meta=meta)


@pytest.fixture
def run() -> Run:
    return Run(traces={0: _rank_trace(0), 1: _rank_trace(1)})


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)

    # strict: no NaN/Infinity literals, exact decimals
    def bad(x: str) -> None:
        raise ValueError(f"non-JSON constant {x}")

    return json.loads(raw, parse_float=Decimal, parse_constant=bad)


def _expected_counters(run: Run) -> Counter:
    exp: Counter = Counter()
    for tr in run:
        for col, what, _unit in COUNTERS:
            sub = tr.telemetry.filter(pl.col(col).is_not_null() & pl.col(col).is_finite())
            for dev, n in sub.group_by("device").len().iter_rows():
                exp[(tr.rank, f"GPU{dev} {what}")] += n
    return exp


def test_offline_strict_reading_matches_the_model(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    stats = write_chrome_trace(run, out)
    # the strict checker (nesting, flows bound launch call -> kernel, counter tracks) passes
    checked = perfetto_check.assert_valid(out)
    assert checked.counter_samples == stats.counter_samples > 0 and checked.flows == stats.flows
    doc = _load(out)
    events = doc["traceEvents"]
    origin = int(doc["otherData"]["origin_unix_ns"])
    assert origin == min(
        min(t.nodes["start_ns"].min() for t in run), min(t.telemetry["time_ns"].min() for t in run)
    )
    # required fields and types, per phase
    for e in events:
        assert e["ph"] in {"X", "C", "M", "s", "f"}, e
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] in {"X", "s", "f"}:
            assert isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], Decimal) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], Decimal) and e["dur"] >= 0
        if e["ph"] == "C":
            assert all(isinstance(v, (int, Decimal)) for v in e["args"].values())

    # processes: one per rank, named
    pnames = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert pnames == {0: "rank 0 (NVIDIA H100 80GB HBM3)", 1: "rank 1 (NVIDIA H100 80GB HBM3)"}
    # tracks: one per CPU thread and per GPU stream
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for tr in run:
        n = tr.nodes.filter(pl.col("start_ns").is_not_null())
        exp = {f"CPU thread {t}" for t in n.filter(~pl.col("on_gpu"))["tid"].unique()} | {
            f"GPU {d} stream {s}"
            for d, s in n.filter(pl.col("on_gpu")).select("device", "stream").unique().iter_rows()
        }
        assert {v for (p, _), v in tnames.items() if p == tr.rank} == exp
    assert stats.tracks == len(tnames) == 2 * 4

    # every timed node is one slice, on its track, at its exact ns time and duration
    got = Counter()
    for e in events:
        if e["ph"] == "X":
            start = origin + int(e["ts"] * 1000)
            assert e["ts"] * 1000 == int(e["ts"] * 1000)  # ns-exact literal
            got[(e["pid"], tnames[(e["pid"], e["tid"])], e["name"], start, int(e["dur"] * 1000))] += 1
    exp = Counter()
    for tr in run:
        n = tr.nodes.filter(pl.col("start_ns").is_not_null())
        for row in n.iter_rows(named=True):
            track = (
                f"GPU {row['device']} stream {row['stream']}" if row["on_gpu"] else f"CPU thread {row['tid']}"
            )
            exp[(tr.rank, track, row["name"], row["start_ns"], row["dur_ns"])] += 1
    assert got == exp
    assert stats.slices == sum(exp.values()) == 2 * (3 * (1 + 4 * 3 + 1))
    assert stats.skipped_untimed == 2

    # collective args survive
    colls = [e for e in events if e["ph"] == "X" and e["args"].get("coll_type") == "all_reduce"]
    assert len(colls) == 2 * 3 * 4
    assert sorted({e["args"]["comm_bytes"] for e in colls}) == [1024, 2048, 4096, 8192]

    # slices nest on every track (what Perfetto requires of complete events on a thread)
    by_track = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append((e["ts"], -e["dur"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        stack: list[Decimal] = []
        for ts, _neg, end in sorted(spans):
            while stack and stack[-1] <= ts:
                stack.pop()
            assert not stack or end <= stack[-1], "partially overlapping slices on one track"
            stack.append(end)

    # counters: per rank and GPU, every finite sample, with its exact value
    ctr = Counter((e["pid"], e["name"]) for e in events if e["ph"] == "C")
    assert ctr == _expected_counters(run)
    assert stats.counter_samples == sum(ctr.values()) == 2 * (35 + 35 + 35 + 34)
    p0 = [e for e in events if e["ph"] == "C" and e["pid"] == 0 and e["name"] == "GPU0 power"]
    tel0 = run.traces[0].telemetry.sort("time_ns")
    assert [origin + int(e["ts"] * 1000) for e in p0] == tel0["time_ns"].to_list()
    assert [float(e["args"]["W"]) for e in p0] == tel0["power_w"].to_list()

    # flows: one s/f pair per GPU node whose launching op is in the trace
    s = {e["id"]: e for e in events if e["ph"] == "s"}
    f = {e["id"]: e for e in events if e["ph"] == "f"}
    assert s.keys() == f.keys()
    assert stats.flows == len(s) == 2 * 3 * 4 * 2
    for fid, fe in f.items():
        assert tnames[(fe["pid"], fe["tid"])].startswith("GPU")
        assert tnames[(s[fid]["pid"], s[fid]["tid"])].startswith("CPU")


def test_gzip_output_and_cli(run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "load", lambda path, **kw: run)
    out = tmp_path / "t.json.gz"
    res = CliRunner().invoke(main, ["export", "perfetto", str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = _load(out)
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X") == 2 * 3 * 14
    assert "slices" in res.output
    # refuses to overwrite without --force
    res = CliRunner().invoke(main, ["export", "perfetto", str(tmp_path), "-o", str(out)])
    assert res.exit_code == 2 and "exists" in res.output
    res = CliRunner().invoke(main, ["export", "perfetto", str(tmp_path), "-o", str(out), "--force"])
    assert res.exit_code == 0, res.output


def test_untimed_run_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tr = _rank_trace(0)
    tr = Trace(
        nodes=tr.nodes.with_columns(pl.lit(None, dtype=pl.Int64).alias("start_ns")),
        meta=TraceMeta(rank=0, has_timestamps=False, clock="none"),
    )
    monkeypatch.setattr(loader, "load", lambda path, **kw: Run.single(tr, source="x.et"))
    res = CliRunner().invoke(main, ["export", "perfetto", "x.et", "-o", str(tmp_path / "o.json")])
    assert res.exit_code == 2
    assert res.output.strip().startswith("error: x.et: no timestamps")
    assert not (tmp_path / "o.json").exists()
    # --simulate draws the timeline rebuilt from dependencies, and says so
    res = CliRunner().invoke(
        main, ["export", "perfetto", "x.et", "-o", str(tmp_path / "o.json"), "--simulate"]
    )
    assert res.exit_code == 0, res.output
    doc = _load(tmp_path / "o.json")
    assert doc["otherData"]["simulated_ranks"] == [0]
    names = [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"]
    assert names == ["rank 0 [simulated timeline]"]
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X") == tr.nodes.height


def _trace_processor_bin() -> str:
    env = os.environ.get("PERFETTO_TRACE_PROCESSOR")
    if env:
        return env
    try:
        from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST
        from perfetto.prebuilts.perfetto_prebuilts import get_perfetto_prebuilt

        return get_perfetto_prebuilt(TRACE_PROCESSOR_SHELL_MANIFEST)
    except Exception as exc:  # the package downloads the binary on first use
        pytest.skip(
            "Perfetto's trace_processor_shell is not available offline (the perfetto package fetches it "
            f"on first use: {type(exc).__name__}); set PERFETTO_TRACE_PROCESSOR to a binary to run this"
        )


def test_perfetto_trace_processor_reads_it_back(spawn, run: Run, tmp_path: Path) -> None:  # noqa: ANN001 - the trace processor is a process
    pytest.importorskip("perfetto")
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    binary = _trace_processor_bin()
    out = tmp_path / "trace.json"
    stats = write_chrome_trace(run, out)
    tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=binary))
    try:

        def q(sql: str) -> list:
            return list(tp.query(sql))

        assert q("select count(*) as n from slice")[0].n == stats.slices
        per_name = {r.name: r.n for r in q("select name, count(*) as n from slice group by name")}
        exp = Counter()
        for tr in run:
            exp.update(tr.nodes.filter(pl.col("start_ns").is_not_null())["name"].to_list())
        assert per_name == dict(exp)
        # exact ns durations of the kernels come back
        durs = {r.dur for r in q("select dur from slice where name like 'ncclDevKernel%'")}
        assert durs == {7_777}
        procs = {r.pid: r.name for r in q("select pid, name from process where pid in (0, 1)")}
        assert procs == {0: "rank 0 (NVIDIA H100 80GB HBM3)", 1: "rank 1 (NVIDIA H100 80GB HBM3)"}
        n_threads = q("select count(*) as n from thread join process using(upid) where pid in (0, 1)")[0].n
        assert n_threads >= stats.tracks
        ctr = q(
            "select p.pid as pid, t.name as name, count(*) as n from counter c "
            "join process_counter_track t on c.track_id = t.id join process p using(upid) group by 1, 2"
        )
        got = Counter()
        for r in ctr:
            got[(r.pid, r.name)] += r.n
        exp_c = _expected_counters(run)
        assert sum(got.values()) == sum(exp_c.values()) == stats.counter_samples
        for (pid, name), n in exp_c.items():
            assert sum(v for (p, nm), v in got.items() if p == pid and nm.startswith(name)) == n
        assert q("select count(*) as n from flow")[0].n == stats.flows
    finally:
        tp.close()


@pytest.mark.parametrize("rel", ["hta/a100_ddp_nccl_rank0.json.gz", "hta/trace_filter_2ranks/rank-0.json.gz"])
def test_real_trace_every_timed_node_is_one_slice(rel: str, tmp_path: Path) -> None:
    from tests.conftest import shared_trace

    src = shared_trace(rel)
    if rel.endswith("rank-0.json.gz"):
        src = src.parent  # the two-rank directory
    run = loader.load(src)
    out = tmp_path / "t.json"
    stats = write_chrome_trace(run, out)
    doc = _load(out)
    events = doc["traceEvents"]
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    got = Counter()
    for e in events:
        if e["ph"] == "X":
            got[(e["pid"], tnames[(e["pid"], e["tid"])])] += 1
    exp = Counter()
    n_launched = 0
    for tr in run:
        n = tr.nodes.filter(pl.col("start_ns").is_not_null())
        cpu = n.filter(~pl.col("on_gpu"))
        for t, k in cpu.group_by("tid").len().iter_rows():
            exp[(tr.rank, f"CPU thread {t}")] += k
        for d, s, k in n.filter(pl.col("on_gpu")).group_by("device", "stream").len().iter_rows():
            exp[(tr.rank, f"GPU {d} stream {s}")] += k
        # arrows go to GPU ops (not to gpu_annotation ranges), each drawn or counted as left out
        n_launched += n.filter(
            pl.col("on_gpu")
            & pl.col("kind").is_in(["kernel", "memcpy", "memset"])
            & pl.col("launch_id").is_in(cpu["id"].implode())
        ).height
    assert got == exp and stats.slices == sum(exp.values()) > 1000
    assert stats.flows + stats.flows_backwards + stats.flows_unbound == n_launched > 0
    assert stats.flows_backwards == 0 and stats.overlap_slices == 0
    assert len({e["pid"] for e in events if e["ph"] == "X"}) == len(run)
    # complete events nest on every track of these traces
    by_track = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append((e["ts"], -e["dur"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        stack: list[Decimal] = []
        for ts, _neg, end in sorted(spans):
            while stack and stack[-1] <= ts:
                stack.pop()
            assert not stack or end <= stack[-1]
            stack.append(end)
