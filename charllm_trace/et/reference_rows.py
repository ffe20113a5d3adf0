"""Node messages into the node table one at a time, through the protobuf runtime: the reference
decoder (:func:`charllm_trace.et.reader.decode_et_reference`) the fast decoders are tested against."""

from __future__ import annotations

from typing import Any

import orjson
import polars as pl

from charllm_trace.core.model import DEP_SCHEMA, NODE_SCHEMA
from charllm_trace.et import conventions as cv
from charllm_trace.et import schema as pb

_SEND = cv.NODE_TYPE_TO_PB["COMM_SEND"]
_RECV = cv.NODE_TYPE_TO_PB["COMM_RECV"]
#: our attributes that are one column's value as they are (the first listed wins a shared name)
_OUR_COLUMNS: dict[str, str] = {
    cv.A_OUT_SPLIT: "out_split",
    cv.A_IN_SPLIT: "in_split",
    cv.A_COLL_TYPE: "coll_type",
    cv.A_PEER: "peer",
    **{name: col for col, name in cv.NODE_STR_ATTRS.items()},
    **{name: col for col, (name, _) in cv.NODE_INT_ATTRS.items()},
}
#: our attributes that are one column's value as JSON text
_OUR_JSON_COLUMNS = {cv.A_IN_SPLIT + ".json": "in_split", cv.A_OUT_SPLIT + ".json": "out_split"}


def attr_value(a: pb.AttributeProto) -> Any:
    """The Python (JSON) value of an AttributeProto; bytes become hex strings, unset is None."""
    which = a.WhichOneof("value")
    if which is None:
        return None
    v = getattr(a, which)
    if which.endswith("_list"):
        vals = list(v.values)
        if which == "bytes_list":
            return [b.hex() for b in vals]
        if which == "float_list":
            return [float(x) for x in vals]
        return vals
    if which == "bytes_val":
        return v.hex()
    return v


def nodes_frame(
    nodes: list[pb.Node], ours: bool, rank: int | None
) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """(nodes, deps, has_timestamps) from Node messages."""
    cols: dict[str, list[Any]] = {c: [] for c in NODE_SCHEMA}
    deps: dict[str, list[Any]] = {"node": [], "dep": [], "kind": []}
    any_start = False
    for n in nodes:
        row = _node_row(n, ours, deps)
        if not ours and n.start_time_micros:
            any_start = True
        for c in NODE_SCHEMA:
            cols[c].append(row[c])
    df = pl.DataFrame(cols, schema=NODE_SCHEMA)
    if not ours and not any_start:
        df = df.with_columns(pl.lit(None, dtype=pl.Int64).alias("start_ns"))
    return df, pl.DataFrame(deps, schema=DEP_SCHEMA), (any_start if not ours else True)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= (1 << 63) else v


def _node_row(n: pb.Node, ours: bool, deps: dict[str, list[Any]]) -> dict[str, Any]:
    """One node's row (its dependencies appended to ``deps``)."""
    row: dict[str, Any] = dict.fromkeys(NODE_SCHEMA)
    nid = _signed(n.id)
    row["id"] = nid
    row["name"] = n.name
    row["node_type"] = cv.PB_TO_NODE_TYPE.get(n.type, "INVALID")
    for kind, ds in (("ctrl", n.ctrl_deps), ("data", n.data_deps)):
        for d in ds:
            deps["node"].append(nid)
            deps["dep"].append(_signed(d))
            deps["kind"].append(kind)
    for fld in ("inputs", "outputs"):
        if n.HasField(fld):
            io = getattr(n, fld)
            row[fld] = {"values": io.values, "shapes": io.shapes, "types": io.types}
    extra, raw, src, dst = _read_attrs(n, row, ours)
    if n.type == _SEND:
        row["peer"] = dst
    elif n.type == _RECV:
        row["peer"] = src
    if not ours:
        _chakra_fields(n, row)
    if raw is not None:
        row["attrs"] = raw
    elif extra:
        row["attrs"] = orjson.dumps(extra).decode()
    return row


def _read_attrs(n: pb.Node, row: dict[str, Any], ours: bool) -> tuple[dict[str, Any], Any, Any, Any]:
    """A node's attributes into ``row``; returns the others (for ``attrs``), our raw attrs text and
    the send/recv source and destination ranks."""
    extra: dict[str, Any] = {}
    raw = None
    src = dst = None
    for a in n.attr:
        name = a.name
        v = attr_value(a)
        is_int = isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63
        if _column_attr(row, name, v, is_int):
            continue
        if name == cv.A_COMM_SRC and n.type in (_SEND, _RECV) and is_int:
            src = v
        elif name == cv.A_COMM_DST and n.type in (_SEND, _RECV) and is_int:
            dst = v
        elif ours and name.startswith(cv.PREFIX):
            raw = _our_attr(row, extra, name, a, raw)
        else:
            extra[name] = attr_value(a)
    return extra, raw, src, dst


def _column_attr(row: dict[str, Any], name: str, v: Any, is_int: bool) -> bool:
    """A Chakra attribute that is a column's value: set it; False when ``name`` is none of them."""
    if name == cv.A_IS_CPU_OP and (isinstance(v, bool) or is_int):
        row["on_gpu"] = not bool(v)
    elif name == cv.A_TID and is_int:
        row["tid"] = v
    elif name == cv.A_STREAM and is_int:
        row["stream"] = v
    elif name == cv.A_RF_ID and is_int:
        row["rf_id"] = v
    elif name == cv.A_COMM_TYPE and is_int and v in cv.COMM_TYPE_TO_COLL:
        row["coll_type"] = cv.COMM_TYPE_TO_COLL[v]
    elif name == cv.A_COMM_SIZE and is_int:
        row["comm_bytes"] = v
    elif name == cv.A_PG_NAME and isinstance(v, str):
        row["pg_name"] = v
    else:
        return False
    return True


def _our_attr(row: dict[str, Any], extra: dict[str, Any], name: str, a: pb.AttributeProto, raw: Any) -> Any:
    """One of our writer's ``charllm.`` attributes; returns the raw attrs text (``raw`` unless
    this is it)."""
    if name in _OUR_COLUMNS:
        row[_OUR_COLUMNS[name]] = attr_value(a)
    elif name in _OUR_JSON_COLUMNS:
        row[_OUR_JSON_COLUMNS[name]] = orjson.loads(attr_value(a))
    elif name == cv.A_NULLS:
        for c in attr_value(a):
            if "." in c:
                fld, sub = c.split(".", 1)
                if row[fld] is not None:
                    row[fld][sub] = None
            else:
                row[c] = None
    elif name == cv.A_ATTRS_RAW:
        return attr_value(a)
    elif name == cv.A_PRESENT:
        pass
    elif name.startswith(cv.A_JSON):
        extra[name[len(cv.A_JSON) :]] = orjson.loads(attr_value(a))
    elif name.startswith(cv.A_ESCAPED):
        extra[name[len(cv.A_ESCAPED) :]] = attr_value(a)
    else:
        extra[name] = attr_value(a)
    return raw


def _chakra_fields(n: pb.Node, row: dict[str, Any]) -> None:
    """A foreign node: times from its microsecond fields, send/recv types and its kind."""
    row["start_ns"] = n.start_time_micros * 1000
    row["dur_ns"] = n.duration_micros * 1000
    if row["coll_type"] is None and n.type == _SEND:
        row["coll_type"] = "send"
    elif row["coll_type"] is None and n.type == _RECV:
        row["coll_type"] = "recv"
    if row["on_gpu"] is not None:
        row["kind"] = "kernel" if row["on_gpu"] else "cpu_op"
