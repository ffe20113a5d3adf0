"""The C node encoder (et/_etwrite.c via et/encode.py) writes the very bytes of the protobuf path
(upb's SerializeToString, ``CHARLLM_TRACE_NATIVE=0``): on random traces, on hand-made edge
cases, across batch and buffer boundaries, on the fixture runs and on the shared traces."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings

from charllm_trace.converters.run_dir import convert_pair
from charllm_trace.core import native_libs
from charllm_trace.core.model import Trace, TraceMeta
from charllm_trace.et import _native, writer
from charllm_trace.et.reader import read_et
from charllm_trace.et.writer import encode_et, write_et
from charllm_trace.inputs.loader import load
from tests.conftest import ROOT
from tests.et.test_et_property import decoder, traces
from tests.helpers.et_traces import small_trace
from tests.helpers.fuzz_budget import examples

FIXTURES = ROOT / "tests" / "fixtures" / "traces"


def protobuf_path():
    """The writer's protobuf (upb) path, the C encoder's oracle (``CHARLLM_TRACE_NATIVE=0``, as the
    property tests' numpy decoder)."""
    return decoder("numpy")


def assert_same_bytes(trace: Trace) -> bytes:
    assert _native.lib() is not None
    got = encode_et(trace)
    with protobuf_path():
        want = encode_et(trace)
    assert got == want
    return got


@settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(traces())
def test_random_traces_encode_as_protobuf_does(trace: Trace) -> None:
    assert_same_bytes(trace)


def _edge_trace() -> Trace:
    """Zero and negative ids, empty and null strings, every node type and collective, sends and
    receives, split lists with and without nulls, sub-µs times, a node with nothing but an id 0."""
    n = 9
    nodes = pl.DataFrame(
        {
            "id": [0, -1, 2**63 - 1, 5, 6, 7, 8, 9, -(2**63)],
            "name": [None, "", "x" * 300, "é☃", "send", "recv", "a2a", "", None],
            "node_type": [None, "COMP", "COMM_COLL", "MEM_LOAD", "COMM_SEND", "COMM_RECV", "COMM_COLL", None, "METADATA"],
            "on_gpu": [None, True, False, True, True, False, None, None, None],
            "tid": [None, -5, 0, 2**63 - 1, None, None, None, None, None],
            "stream": [None, 0, 7, None, None, None, None, None, None],
            "start_ns": [None, 0, 999, 1000, 1_700_000_000_123_456_789, 2**62, None, 1, None],
            "dur_ns": [None, 0, 499, 500, 1_499, 2**61, 2**63 - 1, None, None],
            "rf_id": [None, 0, None, None, None, None, None, None, None],
            "coll_type": [None, None, "all_reduce", "barrier", "send", "recv", "all_to_all", None, None],
            "comm_bytes": [None, None, 0, 2**63 - 1, None, None, 64, None, None],
            "pg_name": [None, "", "0", None, None, None, "pg", None, None],
            "peer": [None, 3, None, -2, 1, 0, None, None, None],
            "root": [None, -(2**31), None, None, None, None, None, None, None],
            "kind": [None, "cpu_op", "kernel", None, "kernel", "kernel", "kernel", None, None],
            "dtype": [None, "", "Float", None, None, None, None, None, None],
            "in_split": [None, None, None, None, None, None, [1, None, 3], [], None],
            "out_split": [None, None, None, None, None, None, [4, 5], None, None],
            "inputs": [None, {"values": None, "shapes": "", "types": "[]"}, {"values": "[1]", "shapes": "[[]]", "types": '["Int"]'}, None, None, None, None, {"values": None, "shapes": None, "types": None}, None],
            "outputs": [None, None, {"values": "", "shapes": "", "types": ""}, None, None, None, None, None, None],
            "attrs": [None, "{}", '{"a": 1}', '{"tid":1,"x":[1,2],"y":null,"z":{"q":1},"w":1.5,"b":true,"l":[true],"s":["a"],"d":[1.0],"m":[1,"a"],"big":18446744073709551615}', "not json", "", '{"a":1}', '{"a":1}', None],
        },
        schema_overrides={"in_split": pl.List(pl.Int64), "out_split": pl.List(pl.Int64), "peer": pl.Int32, "root": pl.Int32},
        strict=False,
    )  # fmt: skip
    assert nodes.height == n
    deps = pl.DataFrame(
        {"node": [5, 5, 5, 6, 9, 2**63 - 1], "dep": [0, -1, 2**63 - 1, 5, -(2**63), 5], "kind": ["ctrl", "data", "ctrl", "data", "ctrl", "ctrl"]},
        schema={"node": pl.Int64, "dep": pl.Int64, "kind": pl.String},
    )  # fmt: skip
    return Trace(nodes=nodes, deps=deps, meta=TraceMeta(rank=1, world_size=4))


@pytest.mark.parametrize("rank", [1, None])
def test_edge_cases_encode_as_protobuf_does(rank: int | None) -> None:
    t = _edge_trace()
    t.meta.rank = rank
    b = assert_same_bytes(t)
    assert b.count(b"charllm.node") == 1  # the node with id 0 and nothing else gets the marker


def test_batches_and_a_node_larger_than_the_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    t = _edge_trace()
    big = t.nodes.with_columns(  # a 9 MiB name: more than the encoder's 8 MiB buffer
        pl.when(pl.col("id") == 5).then(pl.lit("n" * (9 << 20))).otherwise(pl.col("name")).alias("name")
    )
    t = Trace(nodes=big, deps=t.deps, meta=t.meta)
    for batch in (1, 3, writer.BATCH):
        monkeypatch.setattr(writer, "BATCH", batch)
        assert_same_bytes(t)


def test_small_trace_reads_back(tmp_path) -> None:
    t = small_trace()
    p = tmp_path / "r.et"
    p.write_bytes(assert_same_bytes(t))
    assert read_et(p, cache=False).equals(t)


@pytest.mark.parametrize("run", ["cpu-2rank-gloo", "h200-1rank-nccl"])
def test_fixture_runs_encode_as_protobuf_does(run: str) -> None:
    for t in load(FIXTURES / run, cache=False).traces.values():
        assert_same_bytes(t)


@pytest.mark.parametrize(
    ("host_et", "kineto"),
    [
        ("param/dlrm_8ranks_v100/host_et_rank0.json.gz", "param/dlrm_8ranks_v100/kineto_rank0.json.gz"),
        ("param/resnet_host_et.json.gz", None),
        ("hta/simple_add_host_et.json.gz", "hta/simple_add_kineto.json.gz"),
        (None, "hta/a100_ddp_nccl_rank0.json.gz"),
    ],
)
def test_shared_traces_encode_as_protobuf_does(shared, host_et: str | None, kineto: str | None) -> None:
    t, _ = convert_pair(host_et and shared.path(host_et), kineto and shared.path(kineto))
    assert_same_bytes(t)


def test_chakra_written_et_reencodes_as_protobuf_does(shared) -> None:
    assert_same_bytes(read_et(shared.path("chakra/feeder_tests_chakra.0.et"), cache=False))


def test_without_the_compiled_module_writing_is_one_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_libs, "module_path", lambda module: None)
    monkeypatch.delenv("CHARLLM_TRACE_NATIVE", raising=False)
    _native.reset()
    try:
        for _ in range(2):  # the same one-line error each time, and no file left behind
            with pytest.raises(_native.ScannerMissing) as exc:
                write_et(small_trace(), tmp_path / "rank-0.et")
            msg = str(exc.value)
            assert "charllm_trace.et._etscan is not built" in msg and "pip install -e ." in msg
            assert "\n" not in msg
        assert list(tmp_path.iterdir()) == []
    finally:
        _native.reset()


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_rank_beyond_int32_on_send_nodes_is_refused_by_both_paths(
    native: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHARLLM_TRACE_NATIVE", native)
    _native.reset()
    t = small_trace()  # has a COMM_SEND node
    t.meta.rank = 2**31
    try:
        with pytest.raises(ValueError, match="does not fit the int32 comm_src"):
            encode_et(t)
    finally:
        _native.reset()
    monkeypatch.setenv("CHARLLM_TRACE_NATIVE", "1")
    t.meta.rank = 2**31 - 1
    assert_same_bytes(t)
