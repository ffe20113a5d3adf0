"""Our Chakra ET wire format (charllm_trace/et/schema.py) against mlc-chakra's ``et_def_pb2``.

The runtime install carries only ``protobuf``; Chakra's own schema package (the ``chakra`` extra,
part of ``dev``) stays the reference: the descriptors agree field by field, files we write
decode with Chakra's ``protolib`` into the same nodes, a Chakra-written ET reads into the same
tables as through Chakra's classes, and the package works where ``chakra`` cannot be imported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.json_format import MessageToDict

from charllm_trace.et import schema
from tests.conftest import ROOT, shared_trace

try:
    from chakra.schema.protobuf import et_def_pb2 as chakra_pb
except ImportError:  # the runtime install: only the tests that compare with Chakra skip
    chakra_pb = None

needs_chakra = pytest.mark.skipif(
    chakra_pb is None, reason="mlc-chakra is not installed (pip install '.[chakra]')"
)


def _fdp(file_descriptor) -> descriptor_pb2.FileDescriptorProto:
    out = descriptor_pb2.FileDescriptorProto()
    file_descriptor.CopyToProto(out)
    return out


OURS = _fdp(schema.DESCRIPTOR)
THEIRS = _fdp(chakra_pb.DESCRIPTOR) if chakra_pb is not None else OURS
MESSAGES = [m.name for m in THEIRS.message_type]
ENUMS = [e.name for e in THEIRS.enum_type]


# ---------------------------------------------------------------------------
# the descriptors, field by field
# ---------------------------------------------------------------------------


@needs_chakra
def test_same_package_syntax_and_names() -> None:
    assert OURS.package == THEIRS.package == "ChakraProtoMsg"
    assert OURS.syntax == THEIRS.syntax == "proto3"  # proto3: repeated scalars packed, no presence
    assert [m.name for m in OURS.message_type] == MESSAGES
    assert [e.name for e in OURS.enum_type] == ENUMS
    # the messages and enums the code uses are among them
    for name in ("GlobalMetadata", "Node", "AttributeProto", "IOInfo", "Tensor", "Int64List", "StringList"):
        assert name in MESSAGES
    assert {"NodeType", "CollectiveCommType"} <= set(ENUMS)


@needs_chakra
@pytest.mark.parametrize("name", MESSAGES)
def test_message_fields(name: str) -> None:
    ours = next(m for m in OURS.message_type if m.name == name)
    theirs = next(m for m in THEIRS.message_type if m.name == name)
    assert [f.name for f in ours.field] == [f.name for f in theirs.field]
    for a, b in zip(ours.field, theirs.field, strict=True):
        where = f"{name}.{b.name}"
        assert a.number == b.number, where
        assert a.type == b.type, where
        assert a.label == b.label, where
        assert a.type_name == b.type_name, where
        assert a.HasField("oneof_index") == b.HasField("oneof_index"), where
        if b.HasField("oneof_index"):
            assert ours.oneof_decl[a.oneof_index].name == theirs.oneof_decl[b.oneof_index].name, where
        assert a.proto3_optional == b.proto3_optional, where
    assert [o.name for o in ours.oneof_decl] == [o.name for o in theirs.oneof_decl]
    assert ours.nested_type == theirs.nested_type and ours.enum_type == theirs.enum_type
    assert ours == theirs  # nothing else (options, reserved ranges) differs either


@needs_chakra
@pytest.mark.parametrize("name", ENUMS)
def test_enum_values(name: str) -> None:
    ours = next(e for e in OURS.enum_type if e.name == name)
    theirs = next(e for e in THEIRS.enum_type if e.name == name)
    assert [(v.name, v.number) for v in ours.value] == [(v.name, v.number) for v in theirs.value]
    assert ours == theirs
    # the module-level constants of a generated *_pb2 module
    for v in theirs.value:
        assert getattr(schema, v.name) == getattr(chakra_pb, v.name) == v.number


@needs_chakra
def test_runtime_descriptors_agree() -> None:
    """What the protobuf runtime built from each: full names, oneofs, repeated-ness, packing."""
    for name in MESSAGES:
        ours = schema.DESCRIPTOR.message_types_by_name[name]
        theirs = chakra_pb.DESCRIPTOR.message_types_by_name[name]
        assert ours.full_name == theirs.full_name
        assert [o.name for o in ours.oneofs] == [o.name for o in theirs.oneofs]
        for o, t in zip(ours.oneofs, theirs.oneofs, strict=True):
            assert [f.name for f in o.fields] == [f.name for f in t.fields]
        for f in theirs.fields:
            g = ours.fields_by_name[f.name]
            assert (g.number, g.type, g.cpp_type, g.is_packed, g.json_name) == (
                f.number,
                f.type,
                f.cpp_type,
                f.is_packed,
                f.json_name,
            ), f"{name}.{f.name}"
            assert (g.message_type and g.message_type.full_name) == (
                f.message_type and f.message_type.full_name
            )
            assert (g.enum_type and g.enum_type.full_name) == (f.enum_type and f.enum_type.full_name)
    assert schema.NodeType.items() == chakra_pb.NodeType.items()
    assert schema.CollectiveCommType.items() == chakra_pb.CollectiveCommType.items()


@needs_chakra
def test_own_pool_never_clashes() -> None:
    """Both are imported here: ours lives in its own pool, Chakra's in the default one."""
    assert schema.POOL is not descriptor_pool.Default()
    assert schema.DESCRIPTOR.pool is schema.POOL
    assert schema.Node is not chakra_pb.Node
    assert descriptor_pool.Default().FindMessageTypeByName("ChakraProtoMsg.Node") is chakra_pb.Node.DESCRIPTOR


# ---------------------------------------------------------------------------
# the bytes
# ---------------------------------------------------------------------------

_SCALAR_SAMPLES = {
    "double": (-1.5, [0.25, -3.0e300]),
    "float": (0.5, [1.5, -2.0]),
    "int32": (-(2**31), [-1, 2**31 - 1]),
    "int64": (-(2**63), [-1, 2**63 - 1]),
    "uint32": (2**32 - 1, [0, 7]),
    "uint64": (2**64 - 1, [1, 2**63]),
    "sint32": (-(2**31), [-1, 1]),
    "sint64": (-(2**63), [-2, 2]),
    "fixed32": (2**32 - 1, [3, 4]),
    "fixed64": (2**64 - 1, [5, 6]),
    "sfixed32": (-7, [-(2**31), 8]),
    "sfixed64": (-9, [-(2**63), 10]),
    "bool": (True, [True, False, True]),
    "string": ("ünïcode ✓", ["a", "", "ß"]),
    "bytes": (b"\x00\xff", [b"", b"\x01"]),
}


def _attrs(mod) -> list:
    out = []
    for scalar, (one, many) in _SCALAR_SAMPLES.items():
        list_cls = getattr(mod, scalar.capitalize() + "List")  # int64 -> Int64List, ...
        out.append(mod.AttributeProto(name=f"{scalar}_v", doc_string="d", **{f"{scalar}_val": one}))
        out.append(mod.AttributeProto(name=f"{scalar}_l", **{f"{scalar}_list": list_cls(values=many)}))
    out.append(mod.AttributeProto(name="empty_list", int64_list=mod.Int64List()))
    return out


def _node(mod):
    return mod.Node(
        id=2**64 - 1,
        name="ncclKernel_AllReduce",
        type=mod.COMM_COLL_NODE,
        ctrl_deps=[1, 2**63],
        data_deps=[3],
        start_time_micros=1_700_000_000_000_001,
        duration_micros=42,
        inputs=mod.IOInfo(values="[1]", shapes="[[2]]", types='["Tensor(float)"]'),
        outputs=mod.IOInfo(values="[]"),
        attr=_attrs(mod),
    )


@needs_chakra
def test_every_value_kind_has_the_same_bytes() -> None:
    """Every oneof member (each scalar and its list), ids at the uint64 edge, IOInfo: same bytes."""
    ours, theirs = _node(schema), _node(chakra_pb)
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    back = chakra_pb.Node.FromString(ours.SerializeToString())
    assert MessageToDict(back) == MessageToDict(ours)
    again = schema.Node.FromString(theirs.SerializeToString())
    assert again == ours
    assert [a.WhichOneof("value") for a in again.attr] == [a.WhichOneof("value") for a in theirs.attr]
    kw = {"tensor_id": 1, "storage_id": 2, "offset": 3, "num_elem": 4, "elem_bytes": 5, "device": "cuda:0"}
    assert schema.Tensor(**kw).SerializeToString() == chakra_pb.Tensor(**kw).SerializeToString()


def _protolib_read(path: Path) -> tuple:
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    f = openFileRd(str(path))
    gm = chakra_pb.GlobalMetadata()
    decodeMessage(f, gm)
    nodes = []
    while True:
        n = chakra_pb.Node()
        if not decodeMessage(f, n):
            break
        nodes.append(n)
    f.close()
    return gm, nodes


@needs_chakra
@pytest.mark.parametrize("suffix", [".et", ".et.gz"])
def test_protolib_decodes_our_files_into_the_same_nodes(tmp_path: Path, suffix: str) -> None:
    from charllm_trace.et.framing import read_bytes
    from charllm_trace.et.reader import parse_messages, read_et
    from charllm_trace.et.writer import write_et
    from tests.helpers.et_traces import small_trace  # imports chakra itself

    t = small_trace()
    p = tmp_path / f"rank-0{suffix}"
    write_et(t, p)
    gm, nodes = _protolib_read(p)
    our_gm, our_nodes = parse_messages(read_bytes(p), p)
    assert len(nodes) == len(our_nodes) == t.nodes.height
    assert gm.SerializeToString(deterministic=True) == our_gm.SerializeToString(deterministic=True)
    for a, b in zip(nodes, our_nodes, strict=True):
        assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
        assert MessageToDict(a) == MessageToDict(b)
    # and they say what the trace says
    assert [n.id for n in nodes] == t.nodes["id"].to_list()
    assert [n.name for n in nodes] == t.nodes["name"].to_list()
    assert [chakra_pb.NodeType.Name(n.type).removesuffix("_NODE") for n in nodes] == t.nodes[
        "node_type"
    ].to_list()
    assert read_et(p, cache=False).equals(t)


@needs_chakra
def test_chakra_written_et_reads_into_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chakra's converter's output: our reader gives the tables it gave through Chakra's classes."""
    from charllm_trace.et import reader

    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    data = src.read_bytes()
    ours, our_manifest = reader.decode_et_reference(data, src)
    fast = reader.read_et(src, cache=False)
    our_gm, our_nodes = reader.parse_messages(data, src)
    monkeypatch.setattr(reader, "pb", chakra_pb)  # the reader as it was, on Chakra's classes
    before, manifest = reader.decode_et_reference(data, src)
    gm, nodes = reader.parse_messages(data, src)
    monkeypatch.undo()
    assert type(nodes[0]) is chakra_pb.Node and type(our_nodes[0]) is schema.Node
    assert ours.equals(before) and ours.deps.equals(before.deps) and our_manifest == manifest
    assert fast.equals(before) and fast.deps.height == before.deps.height
    assert gm.SerializeToString(deterministic=True) == our_gm.SerializeToString(deterministic=True)
    assert len(nodes) == len(our_nodes) == fast.nodes.height
    for a, b in zip(nodes, our_nodes, strict=True):
        assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    # Chakra's protolib reads the same file into the same nodes
    _, via_protolib = _protolib_read(src)
    assert [n.SerializeToString() for n in via_protolib] == [n.SerializeToString() for n in nodes]


# ---------------------------------------------------------------------------
# no chakra at run time
# ---------------------------------------------------------------------------


def test_no_module_of_the_package_imports_chakra() -> None:
    pattern = re.compile(r"^\s*(from\s+chakra[\s.]|import\s+chakra\b)", re.M)
    found = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "charllm_trace").rglob("*.py")
        if pattern.search(p.read_text())
    ]
    assert found == []


_WITHOUT_CHAKRA = textwrap.dedent(
    """
    import sys
    sys.modules["chakra"] = None  # any `import chakra...` now raises ImportError
    try:
        import chakra.schema.protobuf.et_def_pb2  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("chakra is still importable")
    fixture, out = sys.argv[1], sys.argv[2]

    import charllm_trace  # noqa: F401
    import charllm_trace.exports.astra_sim  # noqa: F401
    import charllm_trace.sanitize  # noqa: F401
    from charllm_trace.cli.app import main
    from charllm_trace.et import read_et, write_et
    from charllm_trace.inputs.loader import load

    for args in (["convert", fixture, "-o", out + "/ets"], ["info", out + "/ets"]):
        try:
            main(args)
        except SystemExit as exc:
            assert exc.code in (0, None), (args, exc.code)
    t = load(out + "/ets", cache=False).traces[0]
    assert t.nodes.height > 1000
    write_et(t, out + "/again.et")
    assert read_et(out + "/again.et", cache=False).equals(t)
    print("ok")
    """
)


def test_import_convert_read_and_write_without_chakra(spawn, tmp_path: Path) -> None:
    fixture = ROOT / "tests" / "fixtures" / "traces" / "cpu-2rank-gloo"
    r = subprocess.run(
        [sys.executable, "-c", _WITHOUT_CHAKRA, str(fixture), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert r.stdout.strip().endswith("ok")


def test_schema_builds_with_the_pure_python_protobuf_backend(spawn, tmp_path: Path) -> None:
    """The descriptor is built the same way whatever protobuf backend is selected."""
    code = textwrap.dedent(
        """
        from google.protobuf.internal import api_implementation
        assert api_implementation.Type() == "python", api_implementation.Type()
        from charllm_trace.et import schema as pb
        n = pb.Node(id=2**64 - 1, type=pb.COMM_COLL_NODE, ctrl_deps=[1, 2])
        n.attr.add(name="comm_type", int64_val=pb.REDUCE_SCATTER)
        back = pb.Node.FromString(n.SerializeToString())
        assert back == n and back.attr[0].WhichOneof("value") == "int64_val"
        print("ok")
        """
    )
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"
