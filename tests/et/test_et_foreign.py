"""Reading ETs that other tools wrote: Chakra's attribute conventions, every attribute value type,
timestamps, send/recv peers; the fast decoders must agree with the protobuf-runtime reference."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import encodeMessage

from charllm_trace.et.reader import decode_et_reference, read_et

A = pb.AttributeProto


def _write(path: Path, gm: pb.GlobalMetadata, nodes: list[pb.Node]) -> None:
    with open(path, "wb") as f:
        encodeMessage(f, gm)
        for n in nodes:
            encodeMessage(f, n)


def _foreign_nodes() -> list[pb.Node]:
    comp = pb.Node(
        id=1, name="aten::mm", type=pb.COMP_NODE, start_time_micros=1_700_000_000_000_001, duration_micros=7
    )
    comp.attr.extend(
        [
            A(name="is_cpu_op", bool_val=True),
            A(name="tid", int64_val=3),
            A(name="rf_id", int64_val=42),
            A(name="op_schema", string_val='aten::mm(Tensor "self") -> \\ Tensor\n'),
            A(name="f64", double_val=0.1),
            A(name="f32", float_val=1.5),
            A(name="i32", int32_val=-7),
            A(name="u32", uint32_val=4_000_000_000),
            A(name="u64", uint64_val=2**64 - 1),
            A(name="s32", sint32_val=-5),
            A(name="s64", sint64_val=-(2**40)),
            A(name="fx32", fixed32_val=7),
            A(name="fx64", fixed64_val=2**63 + 5),
            A(name="sfx32", sfixed32_val=-9),
            A(name="sfx64", sfixed64_val=-(2**50)),
            A(name="raw", bytes_val=b"\x00\xff"),
            A(name="ints", int64_list=pb.Int64List(values=[1, -2, 3])),
            A(name="strs", string_list=pb.StringList(values=["a", "ü"])),
            A(name="bools", bool_list=pb.BoolList(values=[True, False])),
            A(name="dbls", double_list=pb.DoubleList(values=[0.5, 2.0])),
            A(name="empty", int64_list=pb.Int64List()),
            A(name="unset"),
        ]
    )
    comp.inputs.values = "[[1, 2]]"
    comp.inputs.shapes = "[[2]]"
    kernel = pb.Node(
        id=2, name="ncclKernel_ReduceScatter", type=pb.COMM_COLL_NODE, start_time_micros=1_700_000_000_000_010
    )
    kernel.ctrl_deps.append(1)
    kernel.attr.extend(
        [
            A(name="is_cpu_op", bool_val=False),
            A(name="stream", int64_val=7),
            A(name="comm_type", int64_val=pb.REDUCE_SCATTER_BLOCK),
            A(name="comm_size", int64_val=1 << 20),
            A(name="pg_name", string_val="0"),
        ]
    )
    send = pb.Node(id=3, name="send", type=pb.COMM_SEND_NODE, start_time_micros=1_700_000_000_000_020)
    send.data_deps.extend([2, 1])
    send.attr.extend(
        [
            A(name="comm_src", int32_val=0),
            A(name="comm_dst", int32_val=5),
            A(name="comm_size", int64_val=64),
            A(name="comm_tag", int32_val=9),
        ]
    )
    recv = pb.Node(id=4, name="recv", type=pb.COMM_RECV_NODE)
    recv.attr.extend(
        [A(name="comm_src", int32_val=6), A(name="comm_dst", int32_val=0), A(name="comm_type", int64_val=99)]
    )
    dup = pb.Node(id=5, name="dup", type=pb.COMP_NODE)
    dup.attr.extend([A(name="k", int64_val=1), A(name="other", int64_val=2), A(name="k", string_val="last")])
    return [comp, kernel, send, recv, dup]


@pytest.fixture
def decoder(et_decoder: str) -> str:
    """The test runs with the C scanner and with the pure numpy decoder (conftest.et_decoder)."""
    return et_decoder


def test_foreign_attributes_and_conventions(tmp_path: Path, decoder: str) -> None:
    p = tmp_path / "other.0.et"
    gm = pb.GlobalMetadata(
        version="0.0.4", attr=[A(name="schema", string_val="1.0.1"), A(name="pid", uint64_val=7)]
    )
    _write(p, gm, _foreign_nodes())
    t = read_et(p, cache=False)
    ref, _ = decode_et_reference(p.read_bytes(), p)
    assert t.equals(ref)
    assert t.meta.source == "chakra-et" and t.meta.source_schema == "1.0.1"
    assert t.meta.has_timestamps is True and t.meta.clock == "unix_ns"
    rows = {r["id"]: r for r in t.nodes.iter_rows(named=True)}
    assert rows[1]["start_ns"] == 1_700_000_000_000_001_000 and rows[1]["dur_ns"] == 7_000
    assert rows[1]["kind"] == "cpu_op" and rows[1]["tid"] == 3 and rows[1]["rf_id"] == 42
    assert rows[1]["inputs"] == {"values": "[[1, 2]]", "shapes": "[[2]]", "types": ""}
    assert rows[2]["outputs"] is None
    attrs = orjson.loads(rows[1]["attrs"])
    assert attrs["op_schema"] == 'aten::mm(Tensor "self") -> \\ Tensor\n'
    assert attrs["u64"] == 2**64 - 1 and attrs["fx64"] == 2**63 + 5 and attrs["s64"] == -(2**40)
    assert attrs["i32"] == -7 and attrs["u32"] == 4_000_000_000 and attrs["sfx32"] == -9
    assert attrs["f32"] == 1.5 and attrs["raw"] == "00ff" and attrs["ints"] == [1, -2, 3]
    assert attrs["empty"] == [] and attrs["unset"] is None
    assert rows[2]["coll_type"] == "reduce_scatter" and rows[2]["comm_bytes"] == 1 << 20
    assert rows[2]["on_gpu"] is True and rows[2]["kind"] == "kernel" and rows[2]["stream"] == 7
    assert rows[3]["coll_type"] == "send" and rows[3]["peer"] == 5
    assert orjson.loads(rows[3]["attrs"]) == {"comm_tag": 9}
    assert rows[4]["coll_type"] == "recv" and rows[4]["peer"] == 6
    assert orjson.loads(rows[4]["attrs"]) == {"comm_type": 99}  # not a known enum value: kept
    assert orjson.loads(rows[5]["attrs"]) == {"k": "last", "other": 2}  # a repeated name: the last wins
    assert rows[4]["start_ns"] == 0  # this file has timestamps, so 0 is a time
    deps = {(r["node"], r["dep"], r["kind"]) for r in t.deps.iter_rows(named=True)}
    assert deps == {(2, 1, "ctrl"), (3, 2, "data"), (3, 1, "data")}
