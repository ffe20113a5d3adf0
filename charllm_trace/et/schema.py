"""The Chakra ET wire format, defined here so the runtime needs only ``protobuf``.

This is the schema of Chakra's ``et_def.proto`` (package ``ChakraProtoMsg``,
proto3) as ``mlc-chakra`` ships it: the same message and enum names, field
numbers, types, labels and oneofs, so the bytes we write are the bytes
Chakra's ``protolib`` reads and the other way round. The descriptor is built
in code in a :class:`~google.protobuf.descriptor_pool.DescriptorPool` of its
own, so it never clashes with ``chakra.schema.protobuf.et_def_pb2`` when both
are imported (the messages are distinct Python classes; exchange them as
bytes). ``tests/test_et_schema.py`` compares this definition with mlc-chakra's,
field by field, whenever mlc-chakra is installed (the ``chakra`` extra).

The module reads like a generated ``*_pb2`` module: message classes
(``Node``, ``GlobalMetadata``, ``AttributeProto``, ...), enum wrappers
(``NodeType``, ``CollectiveCommType``) and the enum values at module level
(``COMP_NODE``, ``ALL_REDUCE``, ...).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import enum_type_wrapper

PACKAGE = "ChakraProtoMsg"

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL = _F.LABEL_OPTIONAL
_REPEATED = _F.LABEL_REPEATED

#: (scalar type name as in the .proto, FieldDescriptorProto type, list message name)
_SCALARS: tuple[tuple[str, int, str], ...] = (
    ("double", _F.TYPE_DOUBLE, "DoubleList"),
    ("float", _F.TYPE_FLOAT, "FloatList"),
    ("int32", _F.TYPE_INT32, "Int32List"),
    ("int64", _F.TYPE_INT64, "Int64List"),
    ("uint32", _F.TYPE_UINT32, "Uint32List"),
    ("uint64", _F.TYPE_UINT64, "Uint64List"),
    ("sint32", _F.TYPE_SINT32, "Sint32List"),
    ("sint64", _F.TYPE_SINT64, "Sint64List"),
    ("fixed32", _F.TYPE_FIXED32, "Fixed32List"),
    ("fixed64", _F.TYPE_FIXED64, "Fixed64List"),
    ("sfixed32", _F.TYPE_SFIXED32, "Sfixed32List"),
    ("sfixed64", _F.TYPE_SFIXED64, "Sfixed64List"),
    ("bool", _F.TYPE_BOOL, "BoolList"),
    ("string", _F.TYPE_STRING, "StringList"),
    ("bytes", _F.TYPE_BYTES, "BytesList"),
)

_NODE_TYPES = (
    "INVALID_NODE",
    "METADATA_NODE",
    "MEM_LOAD_NODE",
    "MEM_STORE_NODE",
    "COMP_NODE",
    "COMM_SEND_NODE",
    "COMM_RECV_NODE",
    "COMM_COLL_NODE",
)

_COLLECTIVE_COMM_TYPES = (
    "ALL_REDUCE",
    "REDUCE",
    "ALL_GATHER",
    "GATHER",
    "SCATTER",
    "BROADCAST",
    "ALL_TO_ALL",
    "REDUCE_SCATTER",
    "REDUCE_SCATTER_BLOCK",
    "BARRIER",
)


def _field(
    msg: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    ftype: int,
    *,
    label: int = _OPTIONAL,
    type_name: str | None = None,
    oneof_index: int | None = None,
) -> None:
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name is not None:
        f.type_name = f".{PACKAGE}.{type_name}"
    if oneof_index is not None:
        f.oneof_index = oneof_index


def _enum(fdp: descriptor_pb2.FileDescriptorProto, name: str, values: tuple[str, ...]) -> None:
    e = fdp.enum_type.add(name=name)
    for number, value in enumerate(values):
        e.value.add(name=value, number=number)


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The ``FileDescriptorProto`` of Chakra's ``et_def.proto``, built field by field."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="charllm_trace/et/et_def.proto", package=PACKAGE, syntax="proto3"
    )

    # AttributeProto: name, doc_string, then the oneof ``value``: for each scalar type in order,
    # ``<type>_val`` (the scalar) and ``<type>_list`` (its list message), numbered from 3.
    attr = fdp.message_type.add(name="AttributeProto")
    _field(attr, "name", 1, _F.TYPE_STRING)
    _field(attr, "doc_string", 2, _F.TYPE_STRING)
    attr.oneof_decl.add(name="value")
    for i, (scalar, ftype, list_name) in enumerate(_SCALARS):
        _field(attr, f"{scalar}_val", 3 + 2 * i, ftype, oneof_index=0)
        _field(attr, f"{scalar}_list", 4 + 2 * i, _F.TYPE_MESSAGE, type_name=list_name, oneof_index=0)

    # <Type>List { repeated <type> values = 1; }
    for _scalar, ftype, list_name in _SCALARS:
        _field(fdp.message_type.add(name=list_name), "values", 1, ftype, label=_REPEATED)

    gm = fdp.message_type.add(name="GlobalMetadata")
    _field(gm, "version", 1, _F.TYPE_STRING)
    _field(gm, "attr", 2, _F.TYPE_MESSAGE, label=_REPEATED, type_name="AttributeProto")

    _enum(fdp, "NodeType", _NODE_TYPES)
    _enum(fdp, "CollectiveCommType", _COLLECTIVE_COMM_TYPES)

    node = fdp.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    _field(node, "type", 3, _F.TYPE_ENUM, type_name="NodeType")
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, label=_REPEATED)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, label=_REPEATED)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "outputs", 9, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "attr", 10, _F.TYPE_MESSAGE, label=_REPEATED, type_name="AttributeProto")

    io = fdp.message_type.add(name="IOInfo")
    _field(io, "values", 1, _F.TYPE_STRING)
    _field(io, "shapes", 2, _F.TYPE_STRING)
    _field(io, "types", 3, _F.TYPE_STRING)

    tensor = fdp.message_type.add(name="Tensor")
    for number, name in enumerate(("tensor_id", "storage_id", "offset", "num_elem", "elem_bytes"), start=1):
        _field(tensor, name, number, _F.TYPE_UINT64)
    _field(tensor, "device", 6, _F.TYPE_STRING)
    return fdp


#: our own pool: never the default one that ``chakra.schema.protobuf.et_def_pb2`` registers in
POOL = descriptor_pool.DescriptorPool()
# AddSerializedFile returns the FileDescriptor with every backend (upb, cpp, pure Python)
DESCRIPTOR = POOL.AddSerializedFile(file_descriptor_proto().SerializeToString())


def _message(name: str) -> type:
    return message_factory.GetMessageClass(DESCRIPTOR.message_types_by_name[name])


AttributeProto = _message("AttributeProto")
DoubleList = _message("DoubleList")
FloatList = _message("FloatList")
Int32List = _message("Int32List")
Int64List = _message("Int64List")
Uint32List = _message("Uint32List")
Uint64List = _message("Uint64List")
Sint32List = _message("Sint32List")
Sint64List = _message("Sint64List")
Fixed32List = _message("Fixed32List")
Fixed64List = _message("Fixed64List")
Sfixed32List = _message("Sfixed32List")
Sfixed64List = _message("Sfixed64List")
BoolList = _message("BoolList")
StringList = _message("StringList")
BytesList = _message("BytesList")
GlobalMetadata = _message("GlobalMetadata")
Node = _message("Node")
IOInfo = _message("IOInfo")
Tensor = _message("Tensor")

NodeType = enum_type_wrapper.EnumTypeWrapper(DESCRIPTOR.enum_types_by_name["NodeType"])
CollectiveCommType = enum_type_wrapper.EnumTypeWrapper(DESCRIPTOR.enum_types_by_name["CollectiveCommType"])

INVALID_NODE = NodeType.Value("INVALID_NODE")
METADATA_NODE = NodeType.Value("METADATA_NODE")
MEM_LOAD_NODE = NodeType.Value("MEM_LOAD_NODE")
MEM_STORE_NODE = NodeType.Value("MEM_STORE_NODE")
COMP_NODE = NodeType.Value("COMP_NODE")
COMM_SEND_NODE = NodeType.Value("COMM_SEND_NODE")
COMM_RECV_NODE = NodeType.Value("COMM_RECV_NODE")
COMM_COLL_NODE = NodeType.Value("COMM_COLL_NODE")

ALL_REDUCE = CollectiveCommType.Value("ALL_REDUCE")
REDUCE = CollectiveCommType.Value("REDUCE")
ALL_GATHER = CollectiveCommType.Value("ALL_GATHER")
GATHER = CollectiveCommType.Value("GATHER")
SCATTER = CollectiveCommType.Value("SCATTER")
BROADCAST = CollectiveCommType.Value("BROADCAST")
ALL_TO_ALL = CollectiveCommType.Value("ALL_TO_ALL")
REDUCE_SCATTER = CollectiveCommType.Value("REDUCE_SCATTER")
REDUCE_SCATTER_BLOCK = CollectiveCommType.Value("REDUCE_SCATTER_BLOCK")
BARRIER = CollectiveCommType.Value("BARRIER")

__all__ = [
    "ALL_GATHER",
    "ALL_REDUCE",
    "ALL_TO_ALL",
    "BARRIER",
    "BROADCAST",
    "COMM_COLL_NODE",
    "COMM_RECV_NODE",
    "COMM_SEND_NODE",
    "COMP_NODE",
    "DESCRIPTOR",
    "GATHER",
    "INVALID_NODE",
    "MEM_LOAD_NODE",
    "MEM_STORE_NODE",
    "METADATA_NODE",
    "POOL",
    "REDUCE",
    "REDUCE_SCATTER",
    "REDUCE_SCATTER_BLOCK",
    "SCATTER",
    "AttributeProto",
    "BoolList",
    "BytesList",
    "CollectiveCommType",
    "DoubleList",
    "Fixed32List",
    "Fixed64List",
    "FloatList",
    "GlobalMetadata",
    "IOInfo",
    "Int32List",
    "Int64List",
    "Node",
    "NodeType",
    "Sfixed32List",
    "Sfixed64List",
    "Sint32List",
    "Sint64List",
    "StringList",
    "Tensor",
    "Uint32List",
    "Uint64List",
    "file_descriptor_proto",
]
