"""A vectorised protobuf decoder for Chakra ET nodes (numpy + polars, no per-node Python).

Chakra's reader parses one ``Node`` message at a time and copies every string
into a Python object. Here all messages are decoded together: each *round*
decodes the next field of every message still open (so the number of rounds is
the number of fields in the longest message, not the number of messages), and
strings never leave the file buffer (see :mod:`charllm_trace.et._arrow`).

Rare shapes (attribute lists, floats, bytes, huge unsigned ints) fall back to
the protobuf runtime for just those attributes.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import polars as pl

from charllm_trace.et import _native
from charllm_trace.et import conventions as cv
from charllm_trace.et import schema as pb
from charllm_trace.et._arrow import (
    _STEP,
    InvalidUtf8,
    alloc,
    enum_column,
    first_invalid_utf8,
    primitive_column,
    utf8_column,
    view_column,
)
from charllm_trace.model import DEP_SCHEMA, NODE_SCHEMA, conform

PAD = 32  # zero bytes after the data: varint reads past a message end stop there
_U7F = np.uint64(0x7F)
_U80 = np.uint64(0x80)


class Corrupt(Exception):
    """Bytes that are not a valid protobuf message; ``where`` is a message index."""

    def __init__(self, where: int, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"message {where}: {problem}")


# ---------------------------------------------------------------------------
# wire-level primitives
# ---------------------------------------------------------------------------


def _window(data: np.ndarray, width: int) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(data, shape=(len(data) - width + 1, width), strides=(1, 1))


def varints(data: np.ndarray, pos: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value as uint64, byte count) of the varint at each position."""
    b = data[pos].astype(np.uint64)
    val = b & _U7F
    nb = np.ones(len(pos), dtype=np.int64)
    cont = np.flatnonzero(b & _U80)
    shift = 7
    while cont.size:
        if shift > 63:
            raise Corrupt(int(owner[cont[0]]), "a varint longer than 10 bytes")
        bb = data[pos[cont] + nb[cont]].astype(np.uint64)
        val[cont] |= (bb & _U7F) << np.uint64(shift)
        nb[cont] += 1
        cont = cont[(bb & _U80) != 0]
        shift += 7
    return val, nb


_PACKED_CHUNK = 8 << 20


def packed_varints(
    data: np.ndarray, off: np.ndarray, ln: np.ndarray, owner: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Decode packed repeated varints: (owner of each value, value as uint64).

    Works through the fields in chunks of about ``_PACKED_CHUNK`` bytes to bound memory.
    """
    keep = ln > 0
    off, ln, owner = off[keep], ln[keep], owner[keep]
    if len(ln) > 1 and int(ln.sum()) > _PACKED_CHUNK:
        ends = np.cumsum(ln)
        cuts = np.searchsorted(ends, np.arange(_PACKED_CHUNK, int(ends[-1]), _PACKED_CHUNK), side="right")
        edges = [0, *sorted(set(cuts.tolist()) - {0, len(ln)}), len(ln)]
        parts = [
            _packed_once(data, off[a:b], ln[a:b], owner[a:b])
            for a, b in zip(edges[:-1], edges[1:], strict=True)
        ]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return _packed_once(data, off, ln, owner)


def _packed_once(
    data: np.ndarray, off: np.ndarray, ln: np.ndarray, owner: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    total = int(ln.sum())
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.uint64)
    first = np.cumsum(ln) - ln
    idx = np.repeat(off - first, ln) + np.arange(total, dtype=np.int64)
    b = data[idx].astype(np.uint64)
    is_end = (b & _U80) == 0
    last = first + ln - 1
    if not is_end[last].all():
        bad = int(np.flatnonzero(~is_end[last])[0])
        raise Corrupt(int(owner[bad]), "a packed varint runs past its field")
    vstart = np.flatnonzero(np.concatenate(([True], is_end[:-1])))
    vid = np.cumsum(np.concatenate(([0], is_end[:-1].astype(np.int64))))
    k = np.arange(total, dtype=np.int64) - vstart[vid]
    if (k > 9).any():
        raise Corrupt(int(owner[0]), "a varint longer than 10 bytes")
    contrib = (b & _U7F) << (np.uint64(7) * k.astype(np.uint64))
    values = np.bitwise_or.reduceat(contrib, vstart)
    byte_owner = np.repeat(owner, ln)
    return byte_owner[vstart], values


@dataclass
class Tokens:
    """One row per field occurrence, grouped by message in wire order."""

    msg: np.ndarray  # int64: index of the message
    field: np.ndarray  # int64
    wt: np.ndarray  # int8 wire type
    val: np.ndarray  # uint64: varint/fixed value, or payload length for wire type 2
    off: np.ndarray  # int64: payload offset (wire type 2)

    def select(self, mask: np.ndarray) -> Tokens:
        return Tokens(self.msg[mask], self.field[mask], self.wt[mask], self.val[mask], self.off[mask])


def tokenize(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, base: np.ndarray | None = None
) -> Tokens:
    """Split every message ``data[starts[i]:ends[i]]`` into its fields.

    ``base`` maps message i to the index reported in errors (the ET message number).
    """
    n = len(starts)
    where = np.arange(n, dtype=np.int64) if base is None else base
    pos = starts.astype(np.int64, copy=True)
    act = np.flatnonzero(pos < ends)
    parts: list[tuple[np.ndarray, ...]] = []
    win8 = _window(data, 8)
    while act.size:
        p = pos[act]
        tag, tl = varints(data, p, where[act])
        p = p + tl
        wt = (tag & np.uint64(7)).astype(np.int8)
        field = (tag >> np.uint64(3)).astype(np.int64)
        val = np.zeros(len(act), dtype=np.uint64)
        nxt = p.copy()
        bad = ~np.isin(wt, (0, 1, 2, 5)) | (field == 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise Corrupt(int(where[act[i]]), f"invalid field tag {int(tag[i])}")
        i02 = np.flatnonzero((wt == 0) | (wt == 2))
        if i02.size:
            v, vl = varints(data, p[i02], where[act[i02]])
            val[i02] = v
            nxt[i02] = p[i02] + vl
        off = nxt.copy()
        i2 = np.flatnonzero(wt == 2)
        if i2.size:
            big = val[i2] > np.uint64(1 << 40)
            if big.any():
                raise Corrupt(int(where[act[i2[np.flatnonzero(big)[0]]]]), "a field length beyond the file")
            nxt[i2] = nxt[i2] + val[i2].astype(np.int64)
        i1 = np.flatnonzero(wt == 1)
        if i1.size:
            val[i1] = win8[p[i1]].copy().view("<u8").ravel()
            nxt[i1] = p[i1] + 8
        i5 = np.flatnonzero(wt == 5)
        if i5.size:
            val[i5] = win8[p[i5]][:, :4].copy().view("<u4").ravel()
            nxt[i5] = p[i5] + 4
        over = nxt > ends[act]
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise Corrupt(
                int(where[act[i]]), "a field runs past the end of its message (truncated or corrupt)"
            )
        parts.append((act, field, wt, val, off))
        pos[act] = nxt
        act = act[nxt < ends[act]]
    if not parts:
        e = np.empty(0, np.int64)
        return Tokens(e, e, np.empty(0, np.int8), np.empty(0, np.uint64), e)
    msg = np.concatenate([q[0] for q in parts])
    order = np.argsort(msg, kind="stable")
    return Tokens(
        msg[order],
        np.concatenate([q[1] for q in parts])[order],
        np.concatenate([q[2] for q in parts])[order],
        np.concatenate([q[3] for q in parts])[order],
        np.concatenate([q[4] for q in parts])[order],
    )


def _last_per_msg(t: Tokens, field: int, wt: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a singular field: (present mask, value, offset) per message; the last occurrence wins."""
    sel = np.flatnonzero((t.field == field) & (t.wt == wt))
    present = np.zeros(n, dtype=bool)
    val = np.zeros(n, dtype=np.uint64)
    off = np.zeros(n, dtype=np.int64)
    if sel.size:
        m = t.msg[sel]
        present[m] = True
        val[m] = t.val[sel]  # numpy assigns in order: the last duplicate wins
        off[m] = t.off[sel]
    return present, val, off


def check_text(data: np.ndarray, off: np.ndarray, ln: np.ndarray, where: str) -> None:
    """Raise :class:`Corrupt` unless every slice is strict UTF-8."""
    bad = first_invalid_utf8(data, off, ln.astype(np.int64))
    if bad >= 0:
        raise Corrupt(-1, f"{where} is not valid UTF-8 text")


def strings(
    data: np.ndarray, off: np.ndarray, ln: np.ndarray, name: str, where: str, *, validated: bool = False
) -> pl.Series:
    try:
        return utf8_column(data, off, ln.astype(np.int64), name, validated=validated)
    except InvalidUtf8 as exc:
        raise Corrupt(-1, f"{where} is not valid UTF-8 text") from exc
    except ValueError as exc:  # a string of 1 GiB or more
        raise Corrupt(-1, f"{where}: {exc}") from exc


def _i64(u: np.ndarray) -> np.ndarray:
    return u.view(np.int64)


def _zigzag(u: np.ndarray) -> np.ndarray:
    return (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)


# ---------------------------------------------------------------------------
# attributes
# ---------------------------------------------------------------------------

# value kinds
K_NONE, K_INT, K_BOOL, K_STR, K_PY = 0, 1, 2, 3, 4
# AttributeProto value field numbers
_INT_VARINT = {7, 9, 11, 13}  # int32, int64, uint32, uint64 (varint)
_INT_ZIGZAG = {15, 17}  # sint32, sint64
_F_BOOL = 27
_F_STRING = 29
_F_UINT64 = 13
_F_FIXED64 = 21


# value classes by (field number * 8 + wire type) of the AttributeProto oneof
_C_NONE, _C_INT, _C_ZIGZAG, _C_F32U, _C_F32S, _C_BOOL, _C_STR, _C_PY = range(8)
_VALUE_CLASS = np.full(33 * 8 + 1, _C_PY, dtype=np.int8)
_VALUE_CLASS[0:8] = _C_NONE  # no value field
for _f in _INT_VARINT:
    _VALUE_CLASS[_f * 8 + 0] = _C_INT
for _f in _INT_ZIGZAG:
    _VALUE_CLASS[_f * 8 + 0] = _C_ZIGZAG
_VALUE_CLASS[19 * 8 + 5] = _C_F32U  # fixed32
_VALUE_CLASS[23 * 8 + 5] = _C_F32S  # sfixed32
_VALUE_CLASS[21 * 8 + 1] = _C_INT  # fixed64 (bits as int64; huge ones below)
_VALUE_CLASS[25 * 8 + 1] = _C_INT  # sfixed64
_VALUE_CLASS[_F_BOOL * 8 + 0] = _C_BOOL
_VALUE_CLASS[_F_STRING * 8 + 2] = _C_STR
_KIND_OF_CLASS = np.array([K_NONE, K_INT, K_INT, K_INT, K_INT, K_BOOL, K_STR, K_PY], dtype=np.int8)
_UNSIGNED64 = np.zeros(len(_VALUE_CLASS), dtype=bool)
_UNSIGNED64[_F_UINT64 * 8 + 0] = True
_UNSIGNED64[_F_FIXED64 * 8 + 1] = True


@dataclass
class Attrs:
    """Decoded AttributeProto messages, one row each, in wire order per node."""

    node: np.ndarray  # int64 index of the owning node
    code: np.ndarray  # int64 index into ``names``
    names: list[str]
    kind: np.ndarray  # K_*
    ival: np.ndarray  # int64 (K_INT, K_BOOL)
    soff: np.ndarray  # int64 (K_STR)
    slen: np.ndarray  # int64 (K_STR)
    pyval: dict[int, Any]  # row -> Python value (K_PY: floats, lists, bytes, huge ints)


_NATIVE_ERRORS = {
    -1: "a varint longer than 10 bytes",
    -2: "a field runs past the end of its message (truncated or corrupt)",
    -3: "an invalid field tag",
    -4: "truncated: the message runs past the end of the file",
    -5: "truncated: a message length runs past the end of the file",
    -6: "not a Chakra ET: malformed message length",
    -12: "a text field of 1 GiB or more",
    -13: "more than 2^31 - 1 nodes",
}


def _ptr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


def _native_check(rc: int, err: np.ndarray, where: np.ndarray) -> None:
    if rc < 0:
        i = int(err[0])
        raise Corrupt(int(where[i]) if 0 <= i < len(where) else -1, _NATIVE_ERRORS.get(rc, f"error {rc}"))


def scan_attrs_numpy(
    data: np.ndarray, off: np.ndarray, ln: np.ndarray, where: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(names, code per attribute, value field, wire type, value, payload offset)."""
    a = len(off)
    t = tokenize(data, off, off + ln, where)
    _, name_len, name_off = _last_per_msg(t, 1, 2, a)
    names_s = strings(data, name_off, name_len.astype(np.int64), "name", "an attribute name")
    names = names_s.unique(maintain_order=True).to_list()
    code = names_s.cast(pl.Enum(names)).to_physical().to_numpy().astype(np.int32)
    # the value: the last oneof field present (fields 3..32)
    vsel = np.flatnonzero((t.field >= 3) & (t.field <= 32))
    vfield = np.zeros(a, dtype=np.int32)
    vval = np.zeros(a, dtype=np.uint64)
    voff = np.zeros(a, dtype=np.int64)
    vwt = np.zeros(a, dtype=np.int8)
    m = t.msg[vsel]
    vfield[m] = t.field[vsel]
    vval[m] = t.val[vsel]
    voff[m] = t.off[vsel]
    vwt[m] = t.wt[vsel]
    return names, code, vfield, vwt, vval, voff


_LIST_TYPES = {
    4: pb.DoubleList,
    6: pb.FloatList,
    8: pb.Int32List,
    10: pb.Int64List,
    12: pb.Uint32List,
    14: pb.Uint64List,
    16: pb.Sint32List,
    18: pb.Sint64List,
    20: pb.Fixed32List,
    22: pb.Fixed64List,
    24: pb.Sfixed32List,
    26: pb.Sfixed64List,
    28: pb.BoolList,
    30: pb.StringList,
    32: pb.BytesList,
}


def _py_value(data: np.ndarray, vfield: int, vwt: int, vval: int, voff: int, where: int) -> Any:
    """The value of an attribute the vectorised path does not handle (lists, floats, bytes, huge ints)."""
    if vfield == 3 and vwt == 1:
        return float(np.array([vval], np.uint64).view(np.float64)[0])
    if vfield == 5 and vwt == 5:
        return float(np.array([vval], np.uint32).view(np.float32)[0])
    if vfield in (13, 21) and vwt in (0, 1):
        return int(vval)
    if vwt != 2:
        return None
    raw = data[voff : voff + vval].tobytes()
    if vfield == 31:
        return raw.hex()
    cls = _LIST_TYPES.get(vfield)
    if cls is None:
        return None
    msg = cls()
    try:
        msg.ParseFromString(raw)
    except Exception as exc:  # noqa: BLE001 - any parse failure is corrupt input
        raise Corrupt(where, f"an attribute list does not parse ({exc})") from exc
    vals = list(msg.values)
    if vfield == 32:
        return [b.hex() for b in vals]
    if vfield == 6:
        return [float(x) for x in vals]
    return vals


def decode_attrs(
    data: np.ndarray,
    node: np.ndarray,
    names: list[str],
    code: np.ndarray,
    vfield: np.ndarray,
    vwt: np.ndarray,
    vval: np.ndarray,
    voff: np.ndarray,
    where_base: int,
    kind: np.ndarray | None = None,
    ival: np.ndarray | None = None,
) -> Attrs:
    """Value kinds and integer values of every attribute (vectorised; rare shapes in Python).

    ``node[r] + where_base`` is the ET message index of attribute r's node (for errors).
    """
    if kind is not None and ival is not None:  # the C scanner classified them already
        pyval = {
            r: _py_value(
                data, int(vfield[r]), int(vwt[r]), int(vval[r]), int(voff[r]), int(node[r]) + where_base
            )
            for r in np.flatnonzero(kind == K_PY).tolist()
        }
        return Attrs(node, code, names, kind, ival, voff, vval.view(np.int64), pyval)
    key = vfield.astype(np.int64) * 8 + vwt
    key[(key < 0) | (key >= len(_VALUE_CLASS))] = len(_VALUE_CLASS) - 1
    cls = _VALUE_CLASS[key]
    kind = _KIND_OF_CLASS[cls]
    ival = vval.view(np.int64).copy()  # int32/int64/uint32/uint64/fixed64/sfixed64: the bits as int64
    for c, conv in (
        (_C_ZIGZAG, _zigzag),
        (_C_F32U, lambda v: v.astype(np.uint32).astype(np.int64)),
        (_C_F32S, lambda v: v.astype(np.uint32).view(np.int32).astype(np.int64)),
        (_C_BOOL, lambda v: (v != 0).astype(np.int64)),
    ):
        rows = np.flatnonzero(cls == c)
        if rows.size:
            ival[rows] = conv(vval[rows])
    # uint64 / fixed64 values beyond int64: exact Python ints
    huge = np.flatnonzero(_UNSIGNED64[key] & (vval >= np.uint64(1 << 63)))
    kind[huge] = K_PY
    is_str = kind == K_STR
    soff = np.where(is_str, voff, 0)
    slen = np.where(is_str, vval.view(np.int64), 0)
    pyval: dict[int, Any] = {}
    for r in np.flatnonzero(kind == K_PY).tolist():
        pyval[r] = _py_value(
            data, int(vfield[r]), int(vwt[r]), int(vval[r]), int(voff[r]), int(node[r]) + where_base
        )
    return Attrs(node, code, names, kind, ival, soff, slen, pyval)


# ---------------------------------------------------------------------------
# nodes
# ---------------------------------------------------------------------------

_TYPE_NAMES = np.array([cv.PB_TO_NODE_TYPE.get(i, "INVALID") for i in range(8)], dtype=object)


@dataclass
class NodeColumns:
    frame: pl.DataFrame
    deps: pl.DataFrame
    any_start: bool


def _json_escape(s: pl.Series) -> pl.Series:
    """JSON string literals (quotes included), escaped exactly as orjson does."""
    return (
        pl.DataFrame({"s": s})
        .select(pl.struct("s").struct.json_encode().str.strip_prefix('{"s":').str.strip_suffix("}"))
        .to_series()
    )


def _nulls(name: str, n: int, dtype: pl.DataType) -> pl.Series:
    """A column of ``n`` nulls (built without a Python list)."""
    return pl.Series(name, dtype=dtype).extend_constant(None, n)


def _series(name: str, values: np.ndarray, present: np.ndarray | None, dtype: pl.DataType) -> pl.Series:
    """An Int64 or Boolean column of ``values``, null where ``present`` is False (no copy)."""
    want = np.bool_ if dtype == pl.Boolean else np.int64
    return primitive_column(name, values.astype(want, copy=False), present)


@dataclass
class NodeScan:
    """Where everything of every node is (offsets into the buffer) and its varint values."""

    id: np.ndarray  # uint64
    type: np.ndarray  # uint64
    start_us: np.ndarray  # uint64
    dur_us: np.ndarray  # uint64
    name_off: np.ndarray | None  # (numpy decoder; None from the C scanner, which gives views)
    name_len: np.ndarray | None
    io_present: np.ndarray  # (n, 2) bool: inputs, outputs
    io_off: np.ndarray | None  # (n, 6): inputs values/shapes/types, outputs values/shapes/types
    io_len: np.ndarray | None  # (n, 6)
    dep_node: np.ndarray  # int64 node id
    dep_val: np.ndarray  # int64
    dep_kind: np.ndarray  # uint8: 0 ctrl, 1 data
    attr_node: np.ndarray  # node index (int32 from the C scanner)
    attr_code: np.ndarray  # index into names
    names: list[str]
    vfield: np.ndarray
    vwt: np.ndarray
    vval: np.ndarray  # uint64
    voff: np.ndarray
    # from the C scanner: value kind (K_*) and integer value of every attribute
    kind: np.ndarray | None = None
    ival: np.ndarray | None = None
    # from the C scanner: binary views of the 7 text fields (name, inputs values/shapes/types,
    # outputs values/shapes/types), and which fields hold text that is not UTF-8 (TEXT_FIELDS bits)
    views: list[np.ndarray] | None = None
    bad_text: int = 0
    end: int = -1  # where the scanned messages end (the next part's first message)


#: the text fields in the order they are checked (and reported); bit k of NodeScan.bad_text
TEXT_FIELDS = (
    "a node name",
    "inputs.values",
    "inputs.shapes",
    "inputs.types",
    "outputs.values",
    "outputs.shapes",
    "outputs.types",
    "an attribute value",
)


class _TooManyNames(Exception):
    pass


def _grow(arr: np.ndarray, used: int, cap: int) -> np.ndarray:
    new = alloc((cap,) + arr.shape[1:], arr.dtype)
    new[:used] = arr[:used]
    return new


def _scan_native(
    so: Any, data: np.ndarray, begin: int, size: int, first_index: int = 1, stop: int | None = None
) -> NodeScan:
    """One resumable pass of the C scanner over the Node messages in ``data[begin:size]``.

    With ``stop``, the scan ends before the first message that starts at or after ``stop``.
    """
    stop = size if stop is None else stop
    body = min(size, stop) - begin
    caps = np.array([max(1024, body // 256), max(4096, body // 8), max(4096, body // 32), 4096], np.int64)
    ht = np.zeros(16384, np.int32)
    node_arrs = {
        "id": alloc(caps[0], np.uint64),
        "type": alloc(caps[0], np.uint64),
        "start_us": alloc(caps[0], np.uint64),
        "dur_us": alloc(caps[0], np.uint64),
        "io_present": alloc((caps[0], 2), np.uint8),
        **{f"view{k}": alloc((caps[0], 16), np.uint8) for k in range(7)},
    }
    dep_arrs = {
        "node": alloc(caps[1], np.int64),
        "val": alloc(caps[1], np.uint64),
        "kind": alloc(caps[1], np.uint8),
    }
    attr_arrs = {
        "node": alloc(caps[2], np.int32),
        "code": alloc(caps[2], np.int32),
        "vfield": alloc(caps[2], np.int8),
        "vwt": alloc(caps[2], np.int8),
        "vval": alloc(caps[2], np.uint64),
        "voff": alloc(caps[2], np.int64),  # the payload offset; for ints and bools the value
        "kind": alloc(caps[2], np.int8),
    }
    uname_off = np.zeros(caps[3], np.int64)
    uname_len = np.zeros(caps[3], np.int64)
    state = np.array([begin, 0, 0, 0, 0, 0, 0, 0, 0], np.int64)
    err = np.zeros(2, np.int64)
    while True:
        na_ = node_arrs
        views = (ctypes.c_void_p * 7)(*[na_[f"view{k}"].ctypes.data for k in range(7)])
        rc = so.et_scan(
            _ptr(data), size, _ptr(state), _ptr(caps),
            _ptr(na_["id"]), _ptr(na_["type"]), _ptr(na_["start_us"]), _ptr(na_["dur_us"]),
            ctypes.addressof(views), _ptr(na_["io_present"]),
            _ptr(dep_arrs["node"]), _ptr(dep_arrs["val"]), _ptr(dep_arrs["kind"]),
            _ptr(attr_arrs["node"]), _ptr(attr_arrs["code"]), _ptr(attr_arrs["vfield"]), _ptr(attr_arrs["vwt"]),
            _ptr(attr_arrs["vval"]), _ptr(attr_arrs["voff"]), _ptr(attr_arrs["kind"]),
            _ptr(uname_off), _ptr(uname_len), _ptr(ht), len(ht), _STEP, stop, _ptr(err),
        )  # fmt: skip
        if rc == 0:
            break
        if rc == -11:
            raise _TooManyNames()
        if rc < 0:
            raise Corrupt(int(err[0]) + first_index, _NATIVE_ERRORS.get(rc, f"error {rc}"))
        # out of room: grow what is (nearly) full, everything if one message is just large
        n, nd, na = (int(x) for x in state[1:4])
        grew = False
        for i, used, group in ((0, n, node_arrs), (1, nd, dep_arrs), (2, na, attr_arrs)):
            if used + 1 >= caps[i] * 0.9:
                caps[i] *= 2
                for k in group:
                    group[k] = _grow(group[k], used, int(caps[i]))
                grew = True
        if not grew:
            for i, used, group in ((1, nd, dep_arrs), (2, na, attr_arrs)):
                caps[i] *= 2
                for k in group:
                    group[k] = _grow(group[k], used, int(caps[i]))
        state[6:9] = (n, nd, na)  # the new arrays hold (and have touched) only the used rows
    n, nd, na, nn, bad = (int(x) for x in state[1:6])
    names = strings(data, uname_off[:nn], uname_len[:nn], "name", "an attribute name").to_list()
    return NodeScan(
        id=node_arrs["id"][:n],
        type=node_arrs["type"][:n],
        start_us=node_arrs["start_us"][:n],
        dur_us=node_arrs["dur_us"][:n],
        name_off=None,
        name_len=None,
        io_present=node_arrs["io_present"][:n].view(bool),
        io_off=None,
        io_len=None,
        dep_node=dep_arrs["node"][:nd],
        dep_val=_i64(dep_arrs["val"][:nd]),
        dep_kind=dep_arrs["kind"][:nd],
        attr_node=attr_arrs["node"][:na],
        attr_code=attr_arrs["code"][:na],
        names=names,
        vfield=attr_arrs["vfield"][:na],
        vwt=attr_arrs["vwt"][:na],
        vval=attr_arrs["vval"][:na],
        voff=attr_arrs["voff"][:na],
        kind=attr_arrs["kind"][:na],
        ival=attr_arrs["voff"][:na],  # meaningful where kind is K_INT or K_BOOL
        views=[node_arrs[f"view{k}"][:n] for k in range(7)],
        bad_text=bad,
        end=int(state[0]),
    )


def _scan_numpy(data: np.ndarray, starts: np.ndarray, lens: np.ndarray, where: np.ndarray) -> NodeScan:
    n = len(starts)
    t = tokenize(data, starts, starts + lens, where)
    _, idv, _ = _last_per_msg(t, 1, 0, n)
    _, name_len, name_off = _last_per_msg(t, 2, 2, n)
    _, typev, _ = _last_per_msg(t, 3, 0, n)
    _, startv, _ = _last_per_msg(t, 6, 0, n)
    _, durv, _ = _last_per_msg(t, 7, 0, n)
    dn, dv, dk = [], [], []
    for k, field in enumerate((4, 5)):
        packed = np.flatnonzero((t.field == field) & (t.wt == 2))
        single = np.flatnonzero((t.field == field) & (t.wt == 0))
        owners = [t.msg[single]]
        values = [t.val[single]]
        if packed.size:
            o, v = packed_varints(data, t.off[packed], t.val[packed].astype(np.int64), t.msg[packed])
            owners.append(o)
            values.append(v)
        o = np.concatenate(owners)
        v = np.concatenate(values)
        order = np.argsort(o, kind="stable")
        dn.append(o[order])
        dv.append(v[order])
        dk.append(np.full(len(o), k, np.uint8))
    io_present = np.zeros((n, 2), bool)
    io_off = np.zeros((n, 6), np.int64)
    io_len = np.zeros((n, 6), np.int64)
    for w, field in enumerate((8, 9)):
        present, ln, off = _last_per_msg(t, field, 2, n)
        io_present[:, w] = present
        rows = np.flatnonzero(present)
        sub = tokenize(data, off[rows], off[rows] + ln[rows].astype(np.int64), where[rows])
        for f in (1, 2, 3):
            _, sl, so = _last_per_msg(sub, f, 2, len(rows))
            io_off[rows, w * 3 + f - 1] = so
            io_len[rows, w * 3 + f - 1] = sl.astype(np.int64)
    asel = np.flatnonzero((t.field == 10) & (t.wt == 2))
    attr_node = t.msg[asel]
    names, code, vfield, vwt, vval, voff = scan_attrs_numpy(
        data, t.off[asel], t.val[asel].astype(np.int64), where[attr_node]
    )
    return NodeScan(
        id=idv,
        type=typev,
        start_us=startv,
        dur_us=durv,
        name_off=name_off,
        name_len=name_len.astype(np.int64),
        io_present=io_present,
        io_off=io_off,
        io_len=io_len,
        dep_node=_i64(idv)[np.concatenate(dn)],
        dep_val=_i64(np.concatenate(dv)),
        dep_kind=np.concatenate(dk),
        attr_node=attr_node,
        attr_code=code,
        names=names,
        vfield=vfield,
        vwt=vwt,
        vval=vval,
        voff=voff,
    )


def _kind_column(kind: np.ndarray) -> pl.Series:
    """The deps ``kind`` column (``DEP_SCHEMA``'s Enum) from 0 (ctrl) / 1 (data) codes."""
    return enum_column(kind, DEP_SCHEMA["kind"], "kind")


#: files with more node bytes than this are decoded in parallel parts (threads: the C scanner,
#: numpy and polars release the GIL for the heavy work)
SPLIT_BYTES = 64 << 20


def _split_point(so: Any, data: np.ndarray, begin: int, size: int) -> int:
    """Where the second part starts: a message boundary near the middle, or -1.

    The boundary is guessed from the bytes around the middle (``et_resync``: a position from
    which two dozen plausible Node messages follow), which costs microseconds; walking the
    framing from the start costs a cache miss per message. The guess is checked against where
    the first part's scan stops (:func:`decode_nodes`). Without a guess, the framing is walked.
    """
    target = begin + (size - begin) // 2
    guess = int(so.et_resync(_ptr(data), size, target, 24, 8, 4 << 20))
    if begin < guess < size:
        return guess
    out = np.zeros(2, np.int64)
    if so.et_walk(_ptr(data), size, begin, target, _ptr(out)) == 0 and begin < out[0] < size:
        return int(out[0])
    return -1


def _caught(fn: Any, *args: Any) -> Any:
    """fn(*args), or the exception it raised (returned, not raised)."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the caller decides whether it counts
        return exc


def decode_nodes(data: np.ndarray, begin: int, size: int, *, ours: bool, path: Any = None) -> NodeColumns:
    """Decode the Node messages in ``data[begin:size]`` (the part after the GlobalMetadata)."""
    so = _native.lib()
    threads = min(2, os.cpu_count() or 1, int(os.environ.get("CHARLLM_TRACE_THREADS", "2")))
    mid = (
        _split_point(so, data, begin, size)
        if so is not None and threads > 1 and size - begin > SPLIT_BYTES
        else -1
    )
    if mid < 0:
        parts = [_decode_part(data, begin, size, 1, ours, path)]
    else:
        from concurrent.futures import ThreadPoolExecutor

        # the first part ends before the first message that starts at or after mid; the second
        # starts at mid, numbering its messages from 1 until the first part's count is known
        with ThreadPoolExecutor(2) as ex:
            first = ex.submit(_decode_part, data, begin, size, 1, ours, path, mid)
            second = ex.submit(_caught, _decode_part, data, mid, size, 1, ours, path)
            p1 = first.result()  # the first part's errors come first, as in one pass
            p2 = second.result()
        n1, end1 = p1[0].height, p1[4]
        if end1 != mid:  # the guess was not a message boundary: decode the rest from the true one
            p2 = _decode_part(data, end1, size, 1 + n1, ours, path) if end1 < size else None
        elif isinstance(p2, Exception):
            if isinstance(p2, Corrupt) and p2.where > 0:
                p2.where += n1
            raise p2
        parts = [p1] if p2 is None else [p1, p2]
    any_start = any(bool((p[2] != 0).any()) for p in parts)
    if not ours:
        # Chakra's own times (µs), one chunk per part like every other column: a column chunked
        # differently would make polars copy the whole table into single chunks later
        for k, p in enumerate(parts):
            start = (
                pl.Series("start_ns", _i64(p[2]) * 1000)
                if any_start
                else _nulls("start_ns", len(p[2]), pl.Int64)
            )
            parts[k] = (p[0].with_columns(start, pl.Series("dur_ns", _i64(p[3]) * 1000)), *p[1:])
    frame = pl.concat([conform(p[0], NODE_SCHEMA) for p in parts], rechunk=False)
    deps = pl.concat([p[1] for p in parts], rechunk=False)
    return NodeColumns(frame=frame, deps=deps, any_start=any_start)


def _decode_part(
    data: np.ndarray, begin: int, size: int, first_index: int, ours: bool, path: Any, stop: int | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray, np.ndarray, int]:
    """Decode the messages from ``begin`` up to the first one that starts at or after ``stop``.

    Returns (nodes, deps, start_us, dur_us, the position where the decoded messages end).
    """
    so = _native.lib()
    sc = None
    if so is not None:
        try:
            sc = _scan_native(so, data, begin, size, first_index, stop)
        except _TooManyNames:
            sc = None  # an unusual trace: the numpy decoder has no such limit
    if sc is None:
        from charllm_trace.et.framing import message_bounds

        if stop is not None and so is not None:  # where the C scan would have stopped
            out = np.zeros(2, np.int64)
            if so.et_walk(_ptr(data), size, begin, stop, _ptr(out)) == 0:
                size = int(out[0])
        starts, lens = message_bounds(memoryview(data)[:size], path, start=begin)
        if so is not None:  # the buffer is not padded for the numpy decoder
            padded = np.zeros(size + PAD, np.uint8)
            padded[:size] = data[:size]
            data = padded
        where = np.arange(first_index, first_index + len(starts), dtype=np.int64)
        sc = _scan_numpy(data, starts, lens, where)
        sc.end = size
    n = len(sc.id)
    end = sc.end
    # Everything that can find the input corrupt runs before any zero-copy column exists:
    # an exception while polars frees such columns would reach our release callbacks.
    if sc.views is not None:  # the C scanner checked every text field as it passed
        for k, where in enumerate(TEXT_FIELDS):
            if sc.bad_text >> k & 1:
                raise Corrupt(-1, f"{where} is not valid UTF-8 text")
    else:
        assert sc.name_off is not None and sc.name_len is not None
        assert sc.io_off is not None and sc.io_len is not None
        check_text(data, sc.name_off, sc.name_len, TEXT_FIELDS[0])
        for k in range(6):
            check_text(data, sc.io_off[:, k], sc.io_len[:, k], TEXT_FIELDS[1 + k])
    at = decode_attrs(
        data, sc.attr_node, sc.names, sc.attr_code, sc.vfield, sc.vwt, sc.vval, sc.voff,
        first_index, sc.kind, sc.ival,
    )  # fmt: skip
    if sc.views is None:
        text_rows = np.flatnonzero(at.kind == K_STR)
        check_text(data, at.soff[text_rows], at.slen[text_rows], TEXT_FIELDS[7])

    def text(k: int, name: str) -> pl.Series:
        """Text field k (0 the name, 1-6 inputs/outputs values/shapes/types) of every node."""
        if sc.views is not None:
            return view_column(sc.views[k], data, name)
        assert sc.name_off is not None and sc.name_len is not None
        assert sc.io_off is not None and sc.io_len is not None
        off, ln = (sc.name_off, sc.name_len) if k == 0 else (sc.io_off[:, k - 1], sc.io_len[:, k - 1])
        return strings(data, off, ln, name, TEXT_FIELDS[k], validated=True)

    ids = _i64(sc.id)
    cols: dict[str, Any] = {}
    cols["id"] = pl.Series("id", ids)
    cols["name"] = text(0, "name")
    tcode = np.where(sc.type < np.uint64(8), sc.type, 0).astype(np.int64)
    type_names = pl.Series("node_type", [cv.PB_TO_NODE_TYPE.get(i, "INVALID") for i in range(8)])
    cols["node_type"] = type_names.gather(tcode).alias("node_type")

    # --- dependencies ---------------------------------------------------------
    deps = pl.DataFrame({"node": sc.dep_node, "dep": sc.dep_val, "kind": _kind_column(sc.dep_kind)})

    # --- inputs / outputs ---------------------------------------------------------
    for w, col in enumerate(("inputs", "outputs")):
        parts = {sub: text(1 + w * 3 + k, sub) for k, sub in enumerate(("values", "shapes", "types"))}
        present = sc.io_present[:, w]
        s = pl.DataFrame(parts).select(pl.struct("values", "shapes", "types").alias(col)).to_series()
        if not present.all():
            s = pl.select(pl.when(pl.Series(present)).then(s).otherwise(None).alias(col)).to_series()
        cols[col] = s

    # --- attributes -----------------------------------------------------------------
    _assign_attrs(at, cols, data, n, tcode, ours)

    frame = pl.DataFrame({k: v for k, v in cols.items() if v is not None})
    return frame, deps, sc.start_us, sc.dur_us, end


def _rows_by_code(at: Attrs, codes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(rows, starts): the attribute rows whose name code is in ``codes``, grouped by code.

    The rows of code c are ``rows[starts[c] : starts[c + 1]]``, in ascending order.
    """
    ncodes = len(at.names)
    want = np.zeros(max(1, ncodes), np.uint8)
    want[codes] = 1
    code = np.ascontiguousarray(at.code, np.int32)
    so = _native.lib()
    if so is not None:
        starts = np.zeros(ncodes + 1, np.int64)
        so.et_group(_ptr(code), len(code), _ptr(want), ncodes, _ptr(starts), None)
        rows = np.empty(int(starts[-1]), np.int64)
        so.et_group(_ptr(code), len(code), _ptr(want), ncodes, _ptr(starts), _ptr(rows))
        return rows, starts
    counts = np.bincount(code, minlength=ncodes) if len(code) else np.zeros(ncodes, np.int64)
    sel = np.flatnonzero(want[code]) if len(code) else np.empty(0, np.int64)
    rows = sel[np.argsort(code[sel], kind="stable")]
    starts = np.zeros(ncodes + 1, np.int64)
    np.cumsum(np.where(want[:ncodes] != 0, counts, 0), out=starts[1:])
    return rows, starts


def _assign_attrs(
    at: Attrs, cols: dict[str, Any], data: np.ndarray, n: int, ntype: np.ndarray, ours: bool
) -> None:
    """Turn attribute rows into model columns; unmapped ones into the ``attrs`` JSON text."""
    send = cv.NODE_TYPE_TO_PB["COMM_SEND"]
    recv = cv.NODE_TYPE_TO_PB["COMM_RECV"]
    a = len(at.node)
    consumed = np.zeros(a, dtype=bool)
    int_targets: dict[str, str] = {
        cv.A_TID: "tid",
        cv.A_STREAM: "stream",
        cv.A_RF_ID: "rf_id",
        cv.A_COMM_SIZE: "comm_bytes",
    }
    str_targets: dict[str, str] = {cv.A_PG_NAME: "pg_name"}
    if ours:
        int_targets.update({name: col for col, (name, _) in cv.NODE_INT_ATTRS.items()})
        int_targets[cv.A_PEER] = "peer"
        str_targets.update({name: col for col, name in cv.NODE_STR_ATTRS.items()})
        str_targets[cv.A_COLL_TYPE] = "coll_type"

    # the rows of every attribute name read below, in one pass over the attributes
    used = [*int_targets, *str_targets, cv.A_IS_CPU_OP, cv.A_COMM_TYPE, cv.A_COMM_SRC, cv.A_COMM_DST]
    if ours:
        used += [cv.A_IN_SPLIT, cv.A_OUT_SPLIT, cv.A_IN_SPLIT + ".json", cv.A_OUT_SPLIT + ".json"]
        used += [cv.A_NULLS, cv.A_ATTRS_RAW, cv.A_PRESENT]
    code_of = {name: c for c, name in enumerate(at.names)}
    grouped, starts = _rows_by_code(at, [code_of[u] for u in used if u in code_of])

    def rows_named(name: str) -> np.ndarray:
        c = code_of.get(name)
        if c is None:
            return np.empty(0, np.int64)
        return grouped[starts[c] : starts[c + 1]]

    def put_int(col: str, rows: np.ndarray, values: np.ndarray) -> None:
        arr, present = cols.get("__int_" + col, (np.zeros(n, np.int64), np.zeros(n, bool)))
        arr[at.node[rows]] = values
        present[at.node[rows]] = True
        cols["__int_" + col] = (arr, present)
        consumed[rows] = True

    for name, col in int_targets.items():
        r = rows_named(name)
        r = r[at.kind[r] == K_INT]
        if r.size:
            put_int(col, r, at.ival[r])
    # is_cpu_op: bool (or an int, as Chakra's feeder accepts)
    r = rows_named(cv.A_IS_CPU_OP)
    r = r[(at.kind[r] == K_BOOL) | (at.kind[r] == K_INT)]
    if r.size:
        put_int("__cpu", r, (at.ival[r] != 0).astype(np.int64))
    # comm_type enum -> coll_type (unknown enum values stay in attrs)
    r = rows_named(cv.A_COMM_TYPE)
    r = r[(at.kind[r] == K_INT) & np.isin(at.ival[r], list(cv.COMM_TYPE_TO_COLL))]
    if r.size:
        put_int("__comm_type", r, at.ival[r])
    # comm_src / comm_dst carry the peer on send/recv nodes
    for name, ntp in ((cv.A_COMM_DST, send), (cv.A_COMM_SRC, recv)):
        r = rows_named(name)
        r = r[(at.kind[r] == K_INT) & (ntype[at.node[r]] == ntp)]
        if r.size:
            put_int("peer", r, at.ival[r])
    for name, ntp in ((cv.A_COMM_SRC, send), (cv.A_COMM_DST, recv)):
        r = rows_named(name)
        r = r[(at.kind[r] == K_INT) & (ntype[at.node[r]] == ntp)]
        consumed[r] = True  # our own rank: known from the metadata
    # string columns
    str_cols: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, col in str_targets.items():
        r = rows_named(name)
        r = r[at.kind[r] == K_STR]
        if r.size:
            off = np.zeros(n, np.int64)
            ln = np.zeros(n, np.int64)
            present = np.zeros(n, bool)
            off[at.node[r]] = at.soff[r]
            ln[at.node[r]] = at.slen[r]
            present[at.node[r]] = True
            str_cols[col] = (off, ln, present)
            consumed[r] = True
    # our list/null/raw markers: rare, handled with Python values
    nulls: list[tuple[int, str]] = []
    raw: dict[int, str] = {}
    lists: dict[str, dict[int, Any]] = {"in_split": {}, "out_split": {}}
    if ours:
        for name, col, is_json in (
            (cv.A_IN_SPLIT, "in_split", False),
            (cv.A_OUT_SPLIT, "out_split", False),
            (cv.A_IN_SPLIT + ".json", "in_split", True),
            (cv.A_OUT_SPLIT + ".json", "out_split", True),
        ):
            for r in rows_named(name).tolist():
                if is_json and at.kind[r] == K_STR:
                    try:
                        lists[col][int(at.node[r])] = orjson.loads(_str_at(data, at, r))
                    except orjson.JSONDecodeError:
                        continue  # not ours after all: kept verbatim in attrs
                    consumed[r] = True
                elif not is_json and isinstance(at.pyval.get(r), list):
                    lists[col][int(at.node[r])] = at.pyval[r]
                    consumed[r] = True
        for r in rows_named(cv.A_NULLS).tolist():
            v = at.pyval.get(r)
            if isinstance(v, list):
                nulls.extend((int(at.node[r]), c) for c in v)
                consumed[r] = True
        for r in rows_named(cv.A_ATTRS_RAW).tolist():
            if at.kind[r] == K_STR:
                raw[int(at.node[r])] = _str_at(data, at, r)
                consumed[r] = True
        consumed[rows_named(cv.A_PRESENT)] = True

    # --- build the columns ---------------------------------------------------------
    def int_col(col: str, dtype: pl.DataType) -> pl.Series:
        v = cols.pop("__int_" + col, None)
        if v is None:
            return _nulls(col, n, dtype)
        return _series(col, v[0], v[1], dtype)

    for col in ("tid", "stream", "rf_id", "comm_bytes", "peer", *cv.NODE_INT_ATTRS):
        if col in ("start_ns", "dur_ns") and not ours:
            cols.pop("__int_" + col, None)
            continue
        cols[col] = int_col(col, pl.Int64)
    cpu = cols.pop("__int___cpu", None)
    if cpu is None:
        cols["on_gpu"] = _nulls("on_gpu", n, pl.Boolean)
    else:
        cols["on_gpu"] = _series("on_gpu", cpu[0] == 0, cpu[1], pl.Boolean)
    ct = cols.pop("__int___comm_type", None)
    coll_names = pl.Series([cv.COMM_TYPE_TO_COLL.get(i) for i in range(max(cv.COMM_TYPE_TO_COLL) + 1)])
    if ct is None:
        coll = _nulls("coll_type", n, pl.String)
    else:
        coll = pl.select(
            pl.when(pl.Series(ct[1]))
            .then(coll_names.gather(pl.Series(ct[0])))
            .otherwise(None)
            .alias("coll_type")
        ).to_series()
    for col in ("pg_name", "kind", "dtype", "coll_type"):
        if col in str_cols:
            off, ln, present = str_cols[col]
            s = strings(data, off, ln, col, col, validated=True)  # checked with the attribute values
            s = pl.select(pl.when(pl.Series(present)).then(s).otherwise(None).alias(col)).to_series()
        else:
            s = _nulls(col, n, pl.String)
        if col == "coll_type":
            s = pl.select(pl.coalesce(s, coll).alias(col)).to_series()
        cols[col] = s
    if not ours:
        # Chakra writes no collective type on send/recv nodes: the node type says it
        nt = pl.Series(ntype)
        cols["coll_type"] = pl.select(
            pl.when(cols["coll_type"].is_not_null())
            .then(cols["coll_type"])
            .when(nt == send)
            .then(pl.lit("send"))
            .when(nt == recv)
            .then(pl.lit("recv"))
            .alias("coll_type")
        ).to_series()
        cols["kind"] = pl.select(
            pl.when(cols["on_gpu"])
            .then(pl.lit("kernel"))
            .when(~cols["on_gpu"])
            .then(pl.lit("cpu_op"))
            .alias("kind")
        ).to_series()
    for col in ("in_split", "out_split"):
        if lists[col]:
            vals: list[Any] = [None] * n
            for i, v in lists[col].items():
                vals[i] = v
            cols[col] = pl.Series(col, vals, dtype=pl.List(pl.Int64))
    # --- the attrs JSON text ------------------------------------------------------------
    cols["attrs"] = _attrs_json(at, consumed, data, n, raw, ours)
    _apply_nulls(cols, nulls, n)


def _apply_nulls(cols: dict[str, Any], nulls: list[tuple[int, str]], n: int) -> None:
    """Null out the cells our writer listed in ``charllm.null`` (columns and struct fields)."""
    by_col: dict[str, list[int]] = {}
    for i, c in nulls:
        by_col.setdefault(c, []).append(i)
    for c, idx in by_col.items():
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        m = pl.Series(mask)
        if "." in c:
            fld, sub = c.split(".", 1)
            s = cols.get(fld)
            if s is None or s.dtype != pl.Struct or sub not in ("values", "shapes", "types"):
                continue
            parts = s.struct.unnest().with_columns(
                pl.when(m).then(None).otherwise(pl.col(sub)).cast(pl.String).alias(sub)
            )
            rebuilt = parts.select(pl.struct("values", "shapes", "types").alias(fld)).to_series()
            cols[fld] = pl.select(
                pl.when(s.is_not_null()).then(rebuilt).otherwise(None).alias(fld)
            ).to_series()
        elif c in cols and isinstance(cols[c], pl.Series):
            s = cols[c]
            cols[c] = pl.select(pl.when(m).then(None).otherwise(s).alias(c)).to_series()


def _str_at(data: np.ndarray, at: Attrs, r: int) -> str:
    return data[at.soff[r] : at.soff[r] + at.slen[r]].tobytes().decode("utf-8")


def _attrs_json_native(
    so: Any,
    at: Attrs,
    consumed: np.ndarray,
    is_json_name: np.ndarray,
    keys: list[str],
    data: np.ndarray,
    n: int,
) -> pl.Series | None:
    """The attrs column built by the C scanner; None when a node repeats a key."""
    keyb = [k.encode() for k in keys]
    keyoff = np.zeros(len(keyb) + 1, np.int64)
    keyoff[1:] = np.cumsum([len(k) for k in keyb])
    keybuf = np.frombuffer(b"".join(keyb) + b"\0", np.uint8)
    # values only Python can render (floats, lists, bytes, huge ints), in attribute order
    pyparts = [orjson.dumps(at.pyval[r]) for r in sorted(at.pyval) if not consumed[r]]
    pyoff = np.zeros(len(pyparts) + 1, np.int64)
    np.cumsum([len(b) for b in pyparts], out=pyoff[1:])
    pybuf = np.frombuffer(b"".join(pyparts) + b"\0", np.uint8)
    skip = np.ascontiguousarray(consumed).view(np.uint8)
    node32 = np.ascontiguousarray(at.node, np.int32)
    json_code = np.ascontiguousarray(is_json_name, dtype=np.uint8)
    args = [
        _ptr(data), len(at.node), _ptr(skip), _ptr(node32), _ptr(at.kind), _ptr(at.ival), _ptr(at.soff),
        _ptr(at.slen), _ptr(at.code), _ptr(json_code), _ptr(keybuf), _ptr(keyoff), _ptr(pybuf), _ptr(pyoff),
    ]  # fmt: skip
    # one pass into a buffer sized by an upper bound (untouched pages cost nothing)
    bound = so.et_json(*args, None, None, None, _STEP)
    out = alloc(bound + PAD, np.uint8)
    views = np.zeros((n, 16), np.uint8)
    valid = np.zeros((n + 7) // 8, np.uint8)
    size = so.et_json(*args, _ptr(out), _ptr(views), _ptr(valid), _STEP)
    if size == -12:
        raise Corrupt(-1, "the attributes of one node make 1 GiB of JSON or more")
    if size < 0:
        return None
    out[size : size + PAD] = 0
    present = np.unpackbits(valid, count=n, bitorder="little").view(bool)
    # built from checked text, ASCII and orjson output: valid UTF-8 by construction
    return view_column(views, out[: size + PAD], "attrs", present)


def _attrs_json(
    at: Attrs, consumed: np.ndarray, data: np.ndarray, n: int, raw: dict[int, str], ours: bool
) -> pl.Series:
    """The attrs JSON text of every node from its attributes that did not become columns."""
    out = _nulls("attrs", n, pl.String)
    # the JSON key of every attribute name, and whether its value is JSON text already
    keys: list[str] = []
    is_json_name = np.zeros(len(at.names), dtype=bool)
    for c, name in enumerate(at.names):
        key = name
        if ours and name.startswith(cv.A_JSON):
            key = name[len(cv.A_JSON) :]
            is_json_name[c] = True
        elif ours and name.startswith(cv.A_ESCAPED):
            key = name[len(cv.A_ESCAPED) :]
        keys.append(orjson.dumps(key).decode())
    so = _native.lib()
    native = _attrs_json_native(so, at, consumed, is_json_name, keys, data, n) if so is not None else None
    rows = np.flatnonzero(~consumed) if native is None else np.empty(0, np.int64)
    if native is not None:
        out = native
    if rows.size:
        code = at.code[rows]
        kind = at.kind[rows]
        rawjson = is_json_name[code] & (kind == K_STR)
        kind = np.where(rawjson, 5, kind)
    if rows.size:
        svals = strings(
            data,
            np.where((kind == K_STR) | (kind == 5), at.soff[rows], 0),
            np.where((kind == K_STR) | (kind == 5), at.slen[rows], 0),
            "s",
            "an attribute value",
            validated=True,
        )
        py = [None] * len(rows)
        prow = np.flatnonzero(kind == K_PY)
        for j in prow.tolist():
            py[j] = orjson.dumps(at.pyval[int(rows[j])]).decode()
        df = pl.DataFrame(
            {
                "node": at.node[rows],
                "key": pl.Series(keys).gather(pl.Series(code)),
                "kind": kind,
                "ival": at.ival[rows],
                "s": svals,
                "py": pl.Series(py, dtype=pl.String),
            }
        )
        esc = pl.struct("s").struct.json_encode().str.strip_prefix('{"s":').str.strip_suffix("}")
        val = (
            pl.when(pl.col("kind") == K_INT)
            .then(pl.col("ival").cast(pl.String))
            .when(pl.col("kind") == K_BOOL)
            .then(pl.when(pl.col("ival") != 0).then(pl.lit("true")).otherwise(pl.lit("false")))
            .when(pl.col("kind") == K_STR)
            .then(esc)
            .when(pl.col("kind") == 5)
            .then(pl.col("s"))
            .when(pl.col("kind") == K_NONE)
            .then(pl.lit("null"))
            .otherwise(pl.col("py"))
        )
        frag = df.select(
            pl.col("node"), pl.col("key"), pl.concat_str(pl.col("key"), pl.lit(":"), val).alias("f")
        )
        if frag.select(pl.struct("node", "key").is_duplicated().any()).item():
            # a key twice in one node: the last value wins, at the first key's place (like a dict)
            frag = (
                frag.with_row_index("_i")
                .group_by("node", "key", maintain_order=True)
                .agg(pl.col("_i").first(), pl.col("f").last())
                .sort("_i")
                .drop("_i")
            )
        g = frag.group_by("node", maintain_order=True).agg(pl.col("f").str.join(","))
        texts = g.select(pl.concat_str(pl.lit("{"), pl.col("f"), pl.lit("}"))).to_series()
        out = out.scatter(g["node"], texts)
    if raw:
        idx = list(raw)
        out = out.scatter(idx, pl.Series([raw[i] for i in idx], dtype=pl.String))
    return out
