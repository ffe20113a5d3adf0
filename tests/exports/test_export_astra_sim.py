"""``export astra-sim``: the exported ETs checked against the conditions ASTRA-sim (astra-sim
518bd51, Chakra feeder v3) imposes, decoded with Chakra's own ``protolib``; bad input; and, when
``ASTRA_SIM_BIN`` names a simulator binary, a real run that every rank finishes.

The conditions (``docs/et-conventions.md``, *The ASTRA-sim flavour*): files ``<prefix>.<rank>.et``
starting with a GlobalMetadata; only COMP / COMM_COLL / COMM_SEND / COMM_RECV nodes; ``is_cpu_op``
false everywhere; integer ``comm_type`` (simulated or replayed kinds), ``comm_size``, string
``pg_name`` known to the communicator-group JSON (keys >= 1), ``involved_dim`` a bool list;
send/recv with matching (src, dst, size, tag); unique ids; dependencies that resolve in the
same file and form no cycle; the same collectives in the same order on every member of a group;
``num_ops``/``tensor_size`` on every compute node (roofline mode reads them).
"""

from __future__ import annotations

import dataclasses
import graphlib
import json
import os
import re
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd
from click.testing import CliRunner

import charllm_trace as ct
from charllm_trace.analysis.roofline_cost import MIN_TENSOR_SIZE
from charllm_trace.cli.app import main
from charllm_trace.cli.astra import astra_sim_command
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import ProcessGroup, Run, Trace, TraceMeta
from charllm_trace.exports.astra_sim import MIN_ALL_GATHER, export_astra_sim
from tests.conftest import SHARED_TRACES, shared_trace

ALLOWED_TYPES = {pb.COMP_NODE, pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE}
# ALL_REDUCE, ALL_GATHER, BROADCAST (replayed), ALL_TO_ALL, REDUCE_SCATTER
SIMULATED_OR_REPLAYED = {0, 2, 5, 6, 7}
HANDFUL = 4


# ---------------------------------------------------------------------------
# decoding and the checks
# ---------------------------------------------------------------------------


def decode(path: Path) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    f = openFileRd(str(path))
    gm = pb.GlobalMetadata()
    assert decodeMessage(f, gm), f"{path}: no GlobalMetadata"
    nodes = []
    while True:
        n = pb.Node()
        if not decodeMessage(f, n):
            break
        nodes.append(n)
    f.close()
    return gm, nodes


def attrs(n: pb.Node) -> dict[str, pb.AttributeProto]:
    out = {}
    for a in n.attr:
        assert a.name not in out, f"node {n.id}: attribute {a.name} twice"
        out[a.name] = a
    return out


def _int(a: pb.AttributeProto) -> int:
    case = a.WhichOneof("value")
    assert case in ("int32_val", "int64_val", "uint32_val", "uint64_val"), (
        f"{a.name} is {case}, not an integer"
    )
    return getattr(a, case)


def check_export(out: Path, prefix: str, n_ranks: int) -> dict[int, list[pb.Node]]:
    """Every condition ASTRA-sim checks (module docstring); returns the nodes per rank."""
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"{prefix}.{r}.et" for r in range(n_ranks)] + [f"{prefix}.comm_group.json"])
    groups = json.loads((out / f"{prefix}.comm_group.json").read_text())
    assert isinstance(groups, dict)
    for k, v in groups.items():
        assert re.fullmatch(r"[1-9][0-9]*", k), f"group key {k!r}: ASTRA-sim needs an integer >= 1"
        assert isinstance(v, list) and len(v) >= 2 and all(isinstance(x, int) and 0 <= x < n_ranks for x in v)
    per_rank: dict[int, list[pb.Node]] = {}
    sends: Counter = Counter()
    recvs: Counter = Counter()
    coll_seq: dict[str, dict[int, list[tuple[int, int]]]] = defaultdict(dict)
    for r in range(n_ranks):
        gm, nodes = decode(out / f"{prefix}.{r}.et")
        assert gm.version
        per_rank[r] = nodes
        ids = [n.id for n in nodes]
        assert len(set(ids)) == len(ids), f"rank {r}: duplicate node ids"
        known = set(ids)
        ts: graphlib.TopologicalSorter = graphlib.TopologicalSorter()
        free = 0
        prev_comm = None
        colls: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for n in nodes:
            assert n.type in ALLOWED_TYPES, f"rank {r} node {n.id}: type {pb.NodeType.Name(n.type)}"
            assert not n.ctrl_deps, "order is written as data dependencies"
            assert set(n.data_deps) <= known, f"rank {r} node {n.id}: dependency on a node not in the file"
            assert n.id not in n.data_deps
            ts.add(n.id, *n.data_deps)
            free += not n.data_deps
            a = attrs(n)
            assert a["is_cpu_op"].WhichOneof("value") == "bool_val" and a["is_cpu_op"].bool_val is False
            if n.type == pb.COMP_NODE:
                # roofline mode reads both: tensor_size 0 makes it skip the node and stall, a
                # time under 1 ns aborts it
                assert _int(a["num_ops"]) >= 1 and _int(a["tensor_size"]) >= MIN_TENSOR_SIZE
                continue
            # communication: one at a time per NPU, issued in the chain's order
            if prev_comm is not None:
                assert prev_comm in n.data_deps, f"rank {r}: communication node {n.id} not chained"
            prev_comm = n.id
            size = _int(a["comm_size"])
            assert size >= 1
            assert a["pg_name"].WhichOneof("value") == "string_val"
            pg = a["pg_name"].string_val
            assert pg == "0" or pg in groups, f"group {pg} not in the JSON"
            if pg != "0":
                assert r in groups[pg]
            if n.type == pb.COMM_COLL_NODE:
                ctype = _int(a["comm_type"])
                assert ctype in SIMULATED_OR_REPLAYED
                assert (
                    a["involved_dim"].WhichOneof("value") == "bool_list"
                    and a["involved_dim"].bool_list.values
                )
                if ctype == pb.ALL_GATHER:
                    assert size >= MIN_ALL_GATHER
                if ctype != pb.BROADCAST:
                    colls[pg].append((ctype, size))
            else:
                src, dst, tag = _int(a["comm_src"]), _int(a["comm_dst"]), _int(a["comm_tag"])
                assert src != dst
                key = (src, dst, size, tag % 500_000_000)
                if n.type == pb.COMM_SEND_NODE:
                    assert src == r
                    sends[key] += 1
                else:
                    assert dst == r
                    recvs[key] += 1
        order = list(ts.static_order())  # raises CycleError on any cycle
        assert len(order) == len(nodes)
        assert 1 <= free <= HANDFUL, f"rank {r}: {free} dependency-free nodes"
        for pg, seq in colls.items():
            coll_seq[pg][r] = seq
    assert sends == recvs, "every send has exactly one receive with the same (src, dst, size, tag)"
    for pg, by_rank in coll_seq.items():
        members = groups.get(pg, list(range(n_ranks)))
        seqs = [by_rank.get(r, []) for r in members]
        assert all(s == seqs[0] for s in seqs), f"group {pg}: collectives differ between ranks"
    return per_rank


def check_exclusive(run: Run, per_rank: dict[int, list[pb.Node]]) -> None:
    """Compute durations are exclusive: on every lane they add up to no more than the lane's
    measured span (inclusive durations of nested ops would exceed it); the host lane (GPU idle
    intervals, start offset) to no more than the time from the first rank's start to this
    rank's last op."""
    timed = {
        r: t.nodes.filter(pl.col("start_ns").is_not_null() & pl.col("dur_ns").is_not_null())
        for r, t in run.traces.items()
    }
    first = min(int(t["start_ns"].min()) for t in timed.values())
    for r, nodes in per_rank.items():
        tr = timed[r]
        by_lane: Counter = Counter()
        for n in nodes:
            if n.type == pb.COMP_NODE:
                by_lane[attrs(n)["charllm.lane"].string_val] += n.duration_micros
        assert by_lane
        for lane, total_us in by_lane.items():
            if lane.startswith("thread "):
                sub = tr.filter(~pl.col("on_gpu") & (pl.col("tid") == int(lane.split()[1])))
            elif lane.startswith("stream "):
                dev, stream = (int(x) for x in lane.split()[1].split(":"))
                sub = tr.filter(pl.col("on_gpu") & (pl.col("device") == dev) & (pl.col("stream") == stream))
            else:
                assert lane == "host"
                sub = tr
            start = first if lane == "host" else sub["start_ns"].min()
            span_us = ((sub["start_ns"] + sub["dur_ns"]).max() - start) / 1000
            assert total_us <= span_us + 1, (
                f"rank {r} {lane}: {total_us} µs of work in a {span_us:.0f} µs span"
            )


# ---------------------------------------------------------------------------
# real runs
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dlrm_ets(tmp_path_factory: pytest.TempPathFactory, spawn) -> Path:  # noqa: ANN001 - --workers 2: processes
    src = shared_trace("param/dlrm_8ranks_v100")
    out = tmp_path_factory.mktemp("dlrm") / "et"
    r = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--workers", "2"])
    assert r.exit_code == 0, r.output
    return out


def test_gloo_cpu_run(gloo_ets: Path, tmp_path: Path) -> None:
    out = tmp_path / "astra"
    r = CliRunner().invoke(astra_sim_command, [str(gloo_ets), "-o", str(out), "--prefix", "gloo"])
    assert r.exit_code == 0, r.output
    assert "rank 0: cpu run" in r.output and "--workload-configuration=" in r.output
    per_rank = check_export(out, "gloo", 2)
    run = ct.load(gloo_ets)
    check_exclusive(run, per_rank)
    for rank, nodes in per_rank.items():
        src = run.traces[rank].nodes
        comm = [n for n in nodes if n.type != pb.COMP_NODE]
        # every gloo collective of the rank is there, as communication off the CPU
        assert len(comm) == src.filter(pl.col("node_type").str.starts_with("COMM")).height == 12
        kinds = Counter(attrs(n)["charllm.coll_type"].string_val for n in comm)
        assert kinds == {"all_reduce": 4, "broadcast": 4, "all_gather": 2, "all_to_all": 2}
        assert {_int(attrs(n)["comm_type"]) for n in comm} == {0, 2, 5, 6}
        # no METADATA, no host ET container, CPU ops as compute with their exclusive times
        names = {n.name for n in nodes}
        assert "## process_group:init ##" not in names
        assert not any(x.startswith("[pytorch|profiler|execution_trace|") for x in names)
        mm = [n for n in nodes if n.name in ("aten::mm", "aten::addmm")]
        assert mm and all(_int(attrs(n)["num_ops"]) > 10_000 for n in mm)  # 2·M·K·N from the shapes


def test_dlrm_gpu_run(dlrm_ets: Path, tmp_path: Path) -> None:
    out = tmp_path / "astra"
    r = CliRunner().invoke(astra_sim_command, [str(dlrm_ets), "-o", str(out)])
    assert r.exit_code == 0, r.output
    per_rank = check_export(out, "trace", 8)
    run = ct.load(dlrm_ets)
    check_exclusive(run, per_rank)
    for rank, nodes in per_rank.items():
        src = run.traces[rank].nodes
        gpu_ops = src.filter(pl.col("on_gpu") & pl.col("kind").is_in(["kernel", "memcpy", "memset"])).height
        gaps = [n for n in nodes if n.name == "charllm.host_gap"]
        offset = [n for n in nodes if n.name == "charllm.start_offset"]
        assert len(nodes) == gpu_ops + len(gaps) + len(offset) and gaps and len(offset) <= 1
        comm = [n for n in nodes if n.type == pb.COMM_COLL_NODE]
        assert [_int(attrs(n)["comm_type"]) for n in comm] == [
            _int(attrs(n)["comm_type"]) for n in per_rank[0] if n.type == pb.COMM_COLL_NODE
        ]
        assert {_int(attrs(n)["comm_type"]) for n in comm} == {pb.ALL_REDUCE, pb.ALL_TO_ALL}
        assert all(attrs(n)["pg_name"].string_val == "0" for n in comm)  # the world
        assert any(_int(attrs(n)["num_ops"]) > 10_000 for n in nodes if "gemm" in n.name.lower())
    # without host gaps: the GPU ops alone
    out2 = tmp_path / "astra2"
    r = CliRunner().invoke(astra_sim_command, [str(dlrm_ets), "-o", str(out2), "--no-host-gaps"])
    assert r.exit_code == 0, r.output
    per_rank = check_export(out2, "trace", 8)
    assert not any(n.name == "charllm.host_gap" for nodes in per_rank.values() for n in nodes)


def test_start_offsets(gloo_ets: Path, tmp_path: Path) -> None:
    """ASTRA-sim starts every NPU at 0: a rank whose trace started later begins with a
    ``charllm.start_offset`` compute node that everything else on it waits for."""
    run = ct.load(gloo_ets)
    starts = {r: t.nodes["start_ns"].min() for r, t in run.traces.items()}
    late = max(starts, key=starts.get)
    export_astra_sim(run, tmp_path / "a")
    per_rank = check_export(tmp_path / "a", "trace", 2)
    off = [n for n in per_rank[late] if n.name == "charllm.start_offset"]
    assert len(off) == 1 and off[0].duration_micros == round((starts[late] - min(starts.values())) / 1000)
    assert [n.id for n in per_rank[late] if not n.data_deps] == [off[0].id]
    assert not any(n.name == "charllm.start_offset" for n in per_rank[1 - late])
    export_astra_sim(run, tmp_path / "b", align_starts=True)
    assert not any(n.name == "charllm.start_offset" for n in check_export(tmp_path / "b", "trace", 2)[late])


def test_refuses_to_overwrite_and_names_files(gloo_ets: Path, tmp_path: Path) -> None:
    out = tmp_path / "a"
    assert CliRunner().invoke(astra_sim_command, [str(gloo_ets), "-o", str(out)]).exit_code == 0
    r = (
        CliRunner().invoke(main, ["export", "astra-sim", str(gloo_ets), "-o", str(out)])
        if _registered()
        else (CliRunner().invoke(astra_sim_command, [str(gloo_ets), "-o", str(out)]))
    )
    assert r.exit_code == 2 and "already exists" in r.output and r.output.count("\n") == 1
    assert CliRunner().invoke(astra_sim_command, [str(gloo_ets), "-o", str(out), "--force"]).exit_code == 0


def _registered() -> bool:
    return "export" in main.commands and "astra-sim" in main.commands["export"].commands  # type: ignore[attr-defined]


def test_single_rank_is_refused(gloo_ets: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(astra_sim_command, [str(gloo_ets / "rank-0.et"), "-o", str(tmp_path / "x")])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and r.output.startswith("error: ") and "at least 2 NPUs" in r.output
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------
# small hand-made runs: send/recv, groups, bad input
# ---------------------------------------------------------------------------

US = 1_000


def _trace(rank: int, rows: list[dict], world: int = 2, pgs: tuple = (), timed: bool = True) -> Trace:
    base = {"kind": "cpu_op", "on_gpu": False, "tid": 1, "node_type": "COMP"}
    df = pl.DataFrame([{**base, **x} for x in rows], infer_schema_length=None)
    meta = TraceMeta(
        rank=rank,
        world_size=world,
        process_groups=pgs,
        has_timestamps=timed,
        clock="unix_ns" if timed else "none",
    )
    return Trace(nodes=df, meta=meta)


def _coll(i, start, dur, coll, seq, pg="0", size=4096, tid=2):
    return {"id": i, "name": f"gloo:{coll}", "kind": "annotation", "node_type": "COMM_COLL", "tid": tid,
            "start_ns": start, "dur_ns": dur, "coll_type": coll, "coll_seq": seq, "pg_name": pg, "comm_bytes": size}  # fmt: skip


def _op(i, start, dur, name="aten::add", parent=None):
    return {"id": i, "name": name, "start_ns": start, "dur_ns": dur, "parent": parent}


def _run(*traces: Trace) -> Run:
    return Run(traces={t.meta.rank: t for t in traces}, source="handmade")


def _handmade() -> Run:
    """4 ranks: nested CPU ops, a world all-reduce and barrier, and between ranks 0 and 1 a
    sub-group all-gather of 8 bytes and a send/recv."""
    pgs = (ProcessGroup("0", "default_pg", (0, 1, 2, 3)), ProcessGroup("7", "pair", (0, 1)))
    traces = []
    for r in range(4):
        rows = [
            _op(1, 0, 100 * US, "step"),
            _op(2, 10 * US, 30 * US, "aten::mm", parent=1),  # nested: exclusive times
            _op(3, 50 * US, 40 * US, parent=1),
            _coll(10, 60 * US, 20 * US, "all_reduce", 0, pg="0", size=1 << 20),
            _coll(11, 95 * US, 5 * US, "barrier", 1, pg="0", size=0),
        ]
        if r < 2:
            rows.append(_coll(12, 120 * US, 10 * US, "all_gather", 0, pg="7", size=8))
            p2p = {"id": 13, "name": "gloo:send" if r == 0 else "gloo:recv", "kind": "annotation", "tid": 2,
                   "node_type": "COMM_SEND" if r == 0 else "COMM_RECV", "start_ns": 140 * US, "dur_ns": 10 * US,
                   "coll_type": "send" if r == 0 else "recv", "peer": 1 - r, "pg_name": "7", "comm_bytes": 512}  # fmt: skip
            rows += [p2p, _op(4, 160 * US, 10 * US)]
        traces.append(_trace(r, rows, world=4, pgs=pgs))
    return _run(*traces)


def test_send_recv_groups_and_nesting(tmp_path: Path) -> None:
    res = export_astra_sim(_handmade(), tmp_path / "o", "hm")
    per_rank = check_export(tmp_path / "o", "hm", 4)
    assert res.comm_groups == {"1": [0, 1]}
    step = {r: next(n for n in per_rank[r] if n.name == "step") for r in range(4)}
    assert all(s.duration_micros == 30 for s in step.values())  # 100 µs less its children's 70
    sr = [n for r in (0, 1) for n in per_rank[r] if n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE)]
    assert len(sr) == 2 and len({_int(attrs(n)["comm_tag"]) for n in sr}) == 1
    assert all(attrs(n)["pg_name"].string_val == "1" for n in sr)
    ag = next(n for n in per_rank[0] if attrs(n).get("charllm.coll_type") and n.name == "gloo:all_gather")
    assert _int(attrs(ag)["comm_type"]) == pb.ALL_GATHER and _int(attrs(ag)["comm_size"]) == MIN_ALL_GATHER
    barrier = next(n for n in per_rank[2] if n.name == "gloo:barrier")
    assert _int(attrs(barrier)["comm_type"]) == pb.BROADCAST and barrier.duration_micros == 5  # replayed
    # the op that started after the all-reduce ended waits for it; the all-reduce waits for what ran before
    ids = {n.name: n for n in per_rank[2]}
    assert 10 in ids["aten::add"].data_deps or 10 in ids["gloo:barrier"].data_deps
    assert ids["gloo:all_reduce"].data_deps


def _two(rows0, rows1, **kw) -> Run:
    return _run(_trace(0, rows0, **kw), _trace(1, rows1, **kw))


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (_two([_op(1, 0, 10)], [_op(1, 0, 10)]), "no collective"),
        (_two([_op(1, 0, None)], [_op(1, 0, None)]), "no node has both a start time and a duration"),
        (
            _two([_coll(1, 0, 10, "all_reduce", 0)], [_coll(1, 0, 10, "all_reduce", 0)], world=4),
            "of a world of 4",
        ),
        (
            _two(
                [_coll(1, 0, 10, "all_reduce", 0), _coll(2, 20, 10, "all_reduce", 1)],
                [_coll(1, 0, 10, "all_reduce", 0)],
            ),
            "not on [1]",
        ),
        (
            _two(
                [_coll(1, 0, 10, "all_reduce", 0, pg="a"), _coll(2, 20, 10, "all_reduce", 0, pg="b")],
                [_coll(1, 0, 10, "all_reduce", 0, pg="b"), _coll(2, 20, 10, "all_reduce", 0, pg="a")],
            ),
            "different orders",
        ),
        (
            _two([_coll(1, 0, 10, "all_reduce", 0)], [_coll(1, 0, 10, "all_gather", 0)]),
            "different types",
        ),
    ],
    ids=["no-collectives", "no-durations", "missing-ranks", "unmatched", "order", "types"],
)
def test_bad_input(run: Run, message: str, tmp_path: Path) -> None:
    with pytest.raises(InputError) as ei:
        export_astra_sim(run, tmp_path / "o")
    line = ei.value.one_line()
    assert message in line and "\n" not in line and line.startswith("handmade: ")
    assert not (tmp_path / "o").exists()


def test_ranks_not_from_zero(tmp_path: Path) -> None:
    a = _trace(1, [_coll(1, 0, 10, "all_reduce", 0)], world=None)
    b = _trace(2, [_coll(1, 0, 10, "all_reduce", 0)], world=None)
    with pytest.raises(InputError, match="not 0..1"):
        export_astra_sim(_run(a, b), tmp_path / "o")


def test_untimed_ranks_are_retimed_and_a_cycle_is_noted(tmp_path: Path) -> None:
    """A rank without timestamps is re-timed from its dependencies; data dependencies that
    close a cycle are left out with a note (as ``--simulate`` does), never silently."""

    def tr(rank: int) -> Trace:
        rows = [
            {**_op(1, None, 5 * US), "tid": 1},
            {**_op(2, None, 7 * US), "tid": 1},
            {**_coll(3, None, 3 * US, "all_reduce", 0), "tid": 1},
        ]
        t = _trace(rank, rows, timed=False)
        deps = pl.DataFrame({"node": [1, 2], "dep": [2, 1], "kind": ["data", "data"]})
        return dataclasses.replace(t, deps=deps)

    res = export_astra_sim(_run(tr(0), tr(1)), tmp_path / "o")
    check_export(tmp_path / "o", "trace", 2)
    assert any("no timestamps" in n for n in res.notes) and any("cycle" in n for n in res.notes)


def test_unbreakable_cycle_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from charllm_trace import analysis
    from charllm_trace.core.dag import cycle_error

    def boom(_t):
        raise cycle_error("execution graph", 4)

    monkeypatch.setattr(analysis, "simulate", boom)
    t = [_trace(r, [_coll(1, None, 10, "all_reduce", 0)], timed=False) for r in (0, 1)]
    with pytest.raises(InputError, match="dependencies form cycles"):
        export_astra_sim(_run(*t), tmp_path / "o")


# ---------------------------------------------------------------------------
# ASTRA-sim itself, when a binary is given
# ---------------------------------------------------------------------------

SYSTEM = {
    "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
    "collective-optimization": "localBWAware", "local-mem-bw": 1600, "boost-mode": 0,
    "roofline-enabled": 0, "peak-perf": 900,
}  # fmt: skip


def _configs(tmp: Path, npus: int) -> tuple[Path, Path, Path]:
    """system.json and memory.json from ``$ASTRA_SIM_CONFIGS`` if set, and its
    ``network_<N>npus.yml`` if there is one; otherwise minimal ones (1-D ring, 50 GB/s, 500 ns)."""
    given = Path(os.environ["ASTRA_SIM_CONFIGS"]) if os.environ.get("ASTRA_SIM_CONFIGS") else None
    tmp.mkdir(parents=True, exist_ok=True)
    system, network, memory = tmp / "system.json", tmp / "network.yml", tmp / "memory.json"
    system.write_text(json.dumps(SYSTEM))
    memory.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    network.write_text(
        f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
    )
    if given is not None:
        system, memory = given / "system.json", given / "memory.json"
        if (given / f"network_{npus}npus.yml").exists():
            network = given / f"network_{npus}npus.yml"
    return system, network, memory


def run_astra_sim(
    out: Path, prefix: str, npus: int, tmp: Path, roofline: bool = False, track_mem: bool = False
) -> str:
    binary = os.environ["ASTRA_SIM_BIN"]
    system, network, memory = _configs(tmp / "cfg", npus)
    if roofline or track_mem:  # roofline: compute times from num_ops / tensor_size
        doc = json.loads(system.read_text())
        doc["roofline-enabled"] = int(roofline)
        if track_mem:  # the local memory model reads every node's inputs / outputs
            doc["track-local-mem"] = 1
            doc["local-mem-trace-filename"] = str(tmp / "local_mem_trace")
        system = tmp / "cfg" / "system_variant.json"
        system.write_text(json.dumps(doc))
    logs = tmp / "logs"
    logs.mkdir()
    p = subprocess.run(
        [binary, f"--workload-configuration={out / prefix}", f"--comm-group-configuration={out / prefix}.comm_group.json",
         f"--system-configuration={system}", f"--network-configuration={network}",
         f"--remote-memory-configuration={memory}", f"--logging-folder={logs}"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    text = p.stdout + p.stderr
    assert p.returncode == 0, text[-3000:]
    for r in range(npus):
        assert re.search(rf"sys\[{r}\] finished, \d+ cycles", text), (
            f"sys[{r}] did not finish:\n{text[-3000:]}"
        )
    for bad in ("[critical]", "terminate called", "Assertion"):
        assert bad not in text, text[-3000:]
    if track_mem:
        for r in range(npus):
            assert re.search(rf"sys\[{r}\] peak memory usage: [\d.]+ \w+", text), text[-3000:]
            assert (tmp / f"local_mem_trace.{r}.json").is_file()
    return text


def _peak_bytes(text: str, rank: int) -> float:
    m = re.search(rf"sys\[{rank}\] peak memory usage: ([\d.]+) (\w+)", text)
    assert m, text[-3000:]
    return float(m.group(1)) * {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}[m.group(2)]


@pytest.mark.skipif(
    not os.environ.get("ASTRA_SIM_BIN"), reason="set ASTRA_SIM_BIN to an ASTRA-sim analytical binary"
)
def test_astra_sim_finishes_every_rank(spawn, gloo_ets: Path, tmp_path: Path) -> None:
    out = tmp_path / "gloo"
    export_astra_sim(ct.load(gloo_ets), out, "gloo")
    run_astra_sim(out, "gloo", 2, tmp_path / "g")
    run_astra_sim(out, "gloo", 2, tmp_path / "g_roofline", roofline=True)
    if SHARED_TRACES.is_dir():
        d = tmp_path / "dlrm_et"
        r = CliRunner().invoke(main, ["convert", str(shared_trace("param/dlrm_8ranks_v100")), "-o", str(d)])
        assert r.exit_code == 0, r.output
        export_astra_sim(ct.load(d), tmp_path / "dlrm", "dlrm")
        run_astra_sim(tmp_path / "dlrm", "dlrm", 8, tmp_path / "d")
        run_astra_sim(tmp_path / "dlrm", "dlrm", 8, tmp_path / "d_roofline", roofline=True)
    export_astra_sim(_handmade(), tmp_path / "hm", "hm")  # send/recv, a sub-group, a replayed barrier
    run_astra_sim(tmp_path / "hm", "hm", 4, tmp_path / "h")


def _tensor_io(*tensors: tuple[int, int]) -> dict[str, str]:
    """A host ET ``inputs`` / ``outputs`` record of float32 tensors (id, elements) on the CPU."""
    values = [[t, t, 0, n, 4, "cpu"] for t, n in tensors]
    return {
        "values": json.dumps(values),
        "shapes": "[]",
        "types": json.dumps(["Tensor(float)"] * len(tensors)),
    }


def _with_tensors() -> Run:
    """2 ranks: op 1 writes A (1,000,000 B), op 2 reads A and writes B (2,000,000 B), op 3 reads B;
    A and B are both live while op 2 runs, so ASTRA-sim's local memory peaks at 3,000,000 B."""
    none = _tensor_io()
    rows = [
        {**_op(1, 0, 10 * US, "aten::ones"), "inputs": none, "outputs": _tensor_io((5, 250_000))},
        {**_op(2, 20 * US, 10 * US, "aten::mul"), "inputs": _tensor_io((5, 250_000)), "outputs": _tensor_io((6, 500_000))},
        {**_op(3, 40 * US, 10 * US, "aten::sum"), "inputs": _tensor_io((6, 500_000)), "outputs": none},
        {**_coll(10, 60 * US, 20 * US, "all_reduce", 0, size=1 << 20), "inputs": none, "outputs": none},
    ]  # fmt: skip
    return _run(*(_trace(r, rows) for r in range(2)))


@pytest.mark.skipif(
    not os.environ.get("ASTRA_SIM_BIN"), reason="set ASTRA_SIM_BIN to an ASTRA-sim analytical binary"
)
def test_astra_sim_tracks_local_memory(spawn, gloo_ets: Path, tmp_path: Path) -> None:
    """``track-local-mem: 1`` reads inputs / outputs on every node: the runs finish, and the peak
    of a constructed run is the sum of the tensors it holds at once."""
    export_astra_sim(_with_tensors(), tmp_path / "t", "t")
    text = run_astra_sim(tmp_path / "t", "t", 2, tmp_path / "tm", track_mem=True)
    for r in range(2):
        assert abs(_peak_bytes(text, r) - 3_000_000) < 0.01 * 2**20, text[-3000:]
    export_astra_sim(ct.load(gloo_ets), tmp_path / "g", "g")
    text = run_astra_sim(tmp_path / "g", "g", 2, tmp_path / "gm", track_mem=True)
    assert all(_peak_bytes(text, r) > 0 for r in range(2))  # the host ET's tensors were tracked
