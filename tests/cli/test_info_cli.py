"""``charllm-trace info`` on Chakra's own ET and on runs we write."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.core.model import Run
from charllm_trace.et.writer import write_run
from tests.conftest import shared_trace
from tests.helpers.et_traces import T0, small_trace


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(tmp_path / "cache"))


def _protolib_counts(path: Path) -> tuple[Counter, Counter, Counter]:
    """Node types, and per CollectiveCommType count and bytes, decoded by Chakra's protolib."""
    f = openFileRd(str(path))
    decodeMessage(f, pb.GlobalMetadata())
    types: Counter = Counter()
    coll: Counter = Counter()
    nbytes: Counter = Counter()
    while True:
        n = pb.Node()
        if not decodeMessage(f, n):
            break
        types[pb.NodeType.Name(n.type).removesuffix("_NODE")] += 1
        attrs = {a.name: a for a in n.attr}
        if n.type == pb.COMM_COLL_NODE and "comm_type" in attrs:
            name = pb.CollectiveCommType.Name(attrs["comm_type"].int64_val).lower()
            coll[name] += 1
            nbytes[name] += attrs["comm_size"].int64_val
    f.close()
    return types, coll, nbytes


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_info_on_chakra_converter_output() -> None:
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    types, coll, nbytes = _protolib_counts(src)
    assert types == {"COMP": 3643, "COMM_COLL": 21}  # what PROVENANCE.md states, checked independently
    r = invoke("info", str(src))
    assert r.exit_code == 0, r.output
    out = r.output
    assert "no timestamps" in out
    for t, n in types.items():
        assert any(t in line and f"{n:,}" in line for line in out.splitlines()), (t, n, out)
    r = invoke("info", str(src), "--json")
    assert r.exit_code == 0, r.output
    s = orjson.loads(r.output)
    assert s["nodes_by_type"] == dict(types)
    assert s["has_timestamps"] is False and s["start_ns"] is None
    got = {c["coll_type"]: c for c in s["collectives"] if c["coll_type"]}
    assert {k: v["count"] for k, v in got.items()} == dict(coll)
    assert {k: v["total_bytes"] for k, v in got.items()} == dict(nbytes)
    untyped = [c for c in s["collectives"] if c["coll_type"] is None]
    assert sum(c["count"] for c in untyped) == types["COMM_COLL"] - sum(coll.values())
    assert s["telemetry"]["present"] is False
    assert s["ranks"] == [0]


def test_info_on_a_run_directory(tmp_path: Path) -> None:
    run = Run(traces={0: small_trace(0), 1: small_trace(1)}, manifest={"run_id": "r1"})
    write_run(run, tmp_path / "run")
    r = invoke("info", str(tmp_path / "run"), "--json")
    assert r.exit_code == 0, r.output
    s = orjson.loads(r.output)
    assert s["ranks"] == [0, 1] and s["world_size"] == 2
    expect = Counter()
    for t in run:
        expect.update(t.nodes["node_type"].to_list())
    assert s["nodes_by_type"] == dict(expect)
    assert s["has_timestamps"] is True
    starts = [t.nodes["start_ns"].min() for t in run]
    ends = [(t.nodes["start_ns"] + t.nodes["dur_ns"]).max() for t in run]
    assert s["start_ns"] == min(starts) == T0 and s["end_ns"] == max(ends)
    allreduce = next(c for c in s["collectives"] if c["coll_type"] == "all_reduce")
    assert allreduce["count"] == 2 and allreduce["total_bytes"] == 2 * (4 << 20)
    assert s["process_groups"] == [{"name": "0", "desc": "default_pg", "ranks": [0, 1]}]
    assert s["devices"] == ["NVIDIA H100 80GB HBM3"]
    assert s["telemetry"]["present"] is True and s["telemetry"]["samples"] == 4
    assert "power_w" in s["telemetry"]["columns"]
    # the terminal view says the same
    r = invoke("info", str(tmp_path / "run"))
    assert r.exit_code == 0
    assert "NVIDIA H100 80GB HBM3" in r.output and "all_reduce" in r.output and "4 samples" in r.output


def test_info_says_which_dependencies_of_a_chakra_et_were_dropped(tmp_path, monkeypatch) -> None:
    """Chakra's converter leaves dependencies on absent nodes and on the node itself; the reader
    drops them (they cannot be walked) and info says how many, in text and JSON."""
    import json as _json

    from click.testing import CliRunner

    from charllm_trace.cli.app import main
    from tests.conftest import shared_trace

    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(tmp_path / "cache"))
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    r = CliRunner().invoke(main, ["info", str(src)])
    assert r.exit_code == 0, r.output
    assert (
        "dependencies dropped when read: 1,277 on nodes not in the file, 383 of a node on itself"
        in " ".join(r.output.split())
    )
    r = CliRunner().invoke(main, ["info", str(src), "--json"])
    doc = _json.loads(r.output)
    assert doc["per_rank"][0]["dropped_dependencies"] == {
        "deps_on_absent_nodes": 1277,
        "deps_on_themselves": 383,
    }
