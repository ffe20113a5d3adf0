"""How the trace model maps onto Chakra ET fields and attributes.

``docs/et-conventions.md`` is the reader's version of this module. Standard
Chakra fields and Chakra's customary attribute names are filled as Chakra's own
tools mean them; everything Chakra has no field for lives in attributes whose
names start with :data:`PREFIX`.
"""

from __future__ import annotations

from typing import Any

import orjson

from charllm_trace.et import schema as pb

PREFIX = "charllm."

#: Written into ``GlobalMetadata.version`` by our writer.
ET_VERSION = "0.0.4"

# ---------------------------------------------------------------------------
# Node types and collective types
# ---------------------------------------------------------------------------

#: model node_type -> Chakra NodeType enum value
NODE_TYPE_TO_PB = {k[: -len("_NODE")]: v for k, v in pb.NodeType.items()}
PB_TO_NODE_TYPE = {v: k for k, v in NODE_TYPE_TO_PB.items()}

#: model coll_type -> Chakra CollectiveCommType enum value (``comm_type`` attribute)
COLL_TO_COMM_TYPE = {
    "all_reduce": pb.ALL_REDUCE,
    "reduce": pb.REDUCE,
    "all_gather": pb.ALL_GATHER,
    "gather": pb.GATHER,
    "scatter": pb.SCATTER,
    "broadcast": pb.BROADCAST,
    "all_to_all": pb.ALL_TO_ALL,
    "reduce_scatter": pb.REDUCE_SCATTER,
    "barrier": pb.BARRIER,
}
#: Chakra CollectiveCommType -> model coll_type (REDUCE_SCATTER_BLOCK reads as reduce_scatter)
COMM_TYPE_TO_COLL = {v: k for k, v in COLL_TO_COMM_TYPE.items()}
COMM_TYPE_TO_COLL[pb.REDUCE_SCATTER_BLOCK] = "reduce_scatter"

# ---------------------------------------------------------------------------
# Chakra's customary node attributes (names as Chakra's converter and feeder use them)
# ---------------------------------------------------------------------------

A_COMM_TYPE = "comm_type"  # int64_val, CollectiveCommType
A_COMM_SIZE = "comm_size"  # int64_val, bytes (nccl-tests message size)
A_PG_NAME = "pg_name"  # string_val
A_IS_CPU_OP = "is_cpu_op"  # bool_val
A_TID = "tid"  # int64_val
A_STREAM = "stream"  # int64_val
A_RF_ID = "rf_id"  # int64_val
A_COMM_SRC = "comm_src"  # int32_val, sender's global rank (send/recv nodes)
A_COMM_DST = "comm_dst"  # int32_val, receiver's global rank (send/recv nodes)

# ---------------------------------------------------------------------------
# Our node attributes (no Chakra field exists for these)
# ---------------------------------------------------------------------------

#: model column -> (attribute name, AttributeProto value field)
NODE_INT_ATTRS = {
    "start_ns": (PREFIX + "start_ns", "int64_val"),
    "dur_ns": (PREFIX + "dur_ns", "int64_val"),
    "pid": (PREFIX + "pid", "int64_val"),
    "device": (PREFIX + "device", "int64_val"),
    "parent": (PREFIX + "parent", "int64_val"),
    "launch_id": (PREFIX + "launch_id", "int64_val"),
    "correlation": (PREFIX + "correlation", "int64_val"),
    "external_id": (PREFIX + "external_id", "int64_val"),
    "num_elems": (PREFIX + "num_elems", "int64_val"),
    "coll_seq": (PREFIX + "coll_seq", "int64_val"),
    "root": (PREFIX + "root", "int64_val"),
}
NODE_STR_ATTRS = {
    "kind": PREFIX + "kind",
    "dtype": PREFIX + "dtype",
}
A_PEER = PREFIX + "peer"  # int64_val; only where comm_src/comm_dst cannot carry it
A_COLL_TYPE = PREFIX + "coll_type"  # string_val; only where comm_type cannot carry it
A_IN_SPLIT = PREFIX + "in_split"  # int64_list
A_OUT_SPLIT = PREFIX + "out_split"  # int64_list
#: string_list of model columns that are null although the Chakra field has a value
#: (name, node_type, inputs.values, outputs.types, ...)
A_NULLS = PREFIX + "null"
#: the prefix under which an ``attrs`` key that collides with a reserved name is written
A_ESCAPED = PREFIX + "attr."
#: the prefix under which an ``attrs`` value with no AttributeProto equivalent is written as JSON
A_JSON = PREFIX + "json."
#: the exact ``attrs`` text, written only when the per-key attributes would not give it back
#: (not a JSON object, an empty object, or not in orjson's compact form)
A_ATTRS_RAW = PREFIX + "attrs"
#: a marker written only on a node whose message would otherwise be empty
#: (protolib's reader stops at a zero-length message)
A_PRESENT = PREFIX + "node"

#: Chakra-standard names we read into columns (anything else goes to ``attrs`` verbatim)
CHAKRA_MAPPED = {A_COMM_TYPE, A_COMM_SIZE, A_PG_NAME, A_IS_CPU_OP, A_TID, A_STREAM, A_RF_ID}


def is_reserved(name: str) -> bool:
    """Attribute names the writer fills itself; an ``attrs`` key like this is escaped."""
    return name.startswith(PREFIX) or name in CHAKRA_MAPPED or name in (A_COMM_SRC, A_COMM_DST)


# ---------------------------------------------------------------------------
# GlobalMetadata attributes
# ---------------------------------------------------------------------------

M_MODEL_VERSION = PREFIX + "model_version"  # string; its presence marks a file written by us
M_RANK = PREFIX + "rank"  # int64
M_WORLD_SIZE = PREFIX + "world_size"  # int64
M_DEVICE_MODEL = PREFIX + "device_model"  # string
M_DEVICE_INDEX = PREFIX + "device_index"  # int64
M_HOSTNAME = PREFIX + "hostname"  # string
M_HAS_TIMESTAMPS = PREFIX + "has_timestamps"  # bool
M_CLOCK = PREFIX + "clock"  # string: "unix_ns" or "none"
M_SOURCE = PREFIX + "source"  # string
M_SOURCE_SCHEMA = PREFIX + "source_schema"  # string
M_PROCESS_GROUPS = PREFIX + "process_groups"  # string: JSON [{"name","desc","ranks"}]
M_EXTRA = PREFIX + "extra"  # string: JSON object (TraceMeta.extra)
M_RUN = PREFIX + "run"  # string: JSON object, the run manifest (written by write_run)
M_TELEMETRY_ROWS = PREFIX + "telemetry.rows"  # int64
M_NODE_COUNT = PREFIX + "node_count"  # int64: the Node messages that follow (a cut file is found)
M_TELEMETRY_COL = PREFIX + "telemetry."  # + column: int64_list / double_list, packed
M_TELEMETRY_VALID = ".valid"  # + suffix: bool_list, only when the column has nulls

TELEMETRY_INT_COLS = ("time_ns", "device", "throttle_reasons")


# ---------------------------------------------------------------------------
# IOInfo: a node's inputs / outputs, each sub-field a JSON list as text
# ---------------------------------------------------------------------------


def tensor_entries(io: dict[str, Any] | None, field: str) -> list[tuple[Any, str]]:
    """(entry of ``field``, its type) for every entry of an ``inputs`` / ``outputs`` IOInfo
    (``{"values", "shapes", "types"}``, each a JSON list as text) whose type names a tensor
    (``Tensor(...)``, ``Tensor``...); [] when ``field`` or ``types`` is missing, empty, not
    valid JSON or not a list."""
    if not io or not io.get(field) or not io.get("types"):
        return []
    try:
        entries, types = orjson.loads(io[field]), orjson.loads(io["types"])
    except orjson.JSONDecodeError:
        return []
    if not isinstance(entries, list) or not isinstance(types, list):
        return []
    return [
        (e, t) for e, t in zip(entries, types, strict=False) if isinstance(t, str) and t.startswith("Tensor")
    ]
