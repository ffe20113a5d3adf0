"""Chakra ET node attributes (``AttributeProto``): value kinds and integer values of every one.

The scanners record, per attribute, its name code and its value field (number, wire type,
value or payload offset); :func:`decode_attrs` classifies them into ints, bools, strings and
the rare shapes only Python renders (floats, lists, bytes, huge unsigned ints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from charllm_trace.et import schema as pb
from charllm_trace.et.scanned import Corrupt


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
