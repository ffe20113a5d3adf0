"""The Node messages of a trace written by the C encoder (``_etwrite.c``), from column buffers.

``write_nodes`` gives the bytes the writer's protobuf path gives (``writer.iter_node_messages``,
each message serialized and length-prefixed), several times faster: polars hands over each
batch's columns as numpy arrays (integers, null flags, Arrow string offsets and data) and the C
function encodes whole batches of rows. Python encodes with protobuf only what the C code takes as
ready-made bytes: the attribute names and null markers (once), the all-to-all split lists (rare),
and each distinct ``attrs`` text of a batch (once per text, not per node, and within the texts
once per (name, scalar value) pair: a trace repeats both; ``pbattrs.py``).
The protobuf path stays as the oracle (``CHARLLM_TRACE_NATIVE=0``); ``tests/et/test_et_encode.py``
compares the two on random traces, the fixtures and the shared traces. See docs/native.md.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.core.model import Trace
from charllm_trace.et import _native, pbattrs
from charllm_trace.et import conventions as cv
from charllm_trace.et import schema as pb

_P = ctypes.c_void_p
#: the sub-fields of an IOInfo, and the index of the split-list bytes among _etwrite.c's string columns
_IO_SUBS = ("values", "shapes", "types")
_C_SPLITS = 9


@functools.cache
def _piece_table() -> tuple[np.ndarray, np.ndarray]:
    return _table(_pieces())


def _pieces() -> list[bytes]:
    """The byte pieces ``_etwrite.c`` copies (its ``P_*`` order): attribute names as
    ``AttributeProto.name``, then the null markers as ``StringList.values`` entries."""
    names = [
        cv.A_IS_CPU_OP, cv.A_TID, cv.A_STREAM, cv.A_RF_ID, cv.A_COMM_TYPE, cv.A_COLL_TYPE, cv.A_COMM_SIZE,
        cv.A_PG_NAME, cv.A_COMM_SRC, cv.A_COMM_DST, cv.A_PEER, cv.A_NULLS, cv.A_PRESENT,
    ]  # fmt: skip
    marks = ["name", "node_type"] + [f"{f}.{s}" for f in ("inputs", "outputs") for s in _IO_SUBS]
    attr_names = [name for name, _ in cv.NODE_INT_ATTRS.values()] + list(cv.NODE_STR_ATTRS.values())
    return (
        [pb.AttributeProto(name=a).SerializeToString() for a in names]
        + [pb.StringList(values=[m]).SerializeToString() for m in marks]
        + [pb.AttributeProto(name=a).SerializeToString() for a in attr_names]
    )


def _table(pieces: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of byte strings laid end to end."""
    off = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in pieces], out=off[1:])
    data = np.frombuffer(b"".join(pieces) or b"\0", dtype=np.uint8)
    return off, data


def _string_buffers(s: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """Arrow (offsets, data) of a string column."""
    a = s.rechunk().to_arrow()
    if not hasattr(a, "buffers"):  # a ChunkedArray
        a = a.combine_chunks()
    _valid, offs, data = a.buffers()
    off = np.frombuffer(offs, dtype=np.int64)[a.offset : a.offset + len(a) + 1]
    return off, np.frombuffer(data, dtype=np.uint8) if data is not None and data.size else np.zeros(
        1, np.uint8
    )


def _csr(rows: np.ndarray, vals: np.ndarray, b0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row offsets (n + 1, from 0) and values of the dependencies of rows [b0, b0 + n)."""
    bounds = np.searchsorted(rows, np.arange(b0, b0 + n + 1))
    lo = int(bounds[0])
    vals = np.ascontiguousarray(vals[lo : int(bounds[-1])]) if len(vals) else np.zeros(1, np.int64)
    return (bounds - lo).astype(np.int64), vals


_INT_COLS = ("id", "start_ns", "dur_ns", "tid", "stream", "rf_id", "comm_bytes", "peer", *cv.NODE_INT_ATTRS)


def _small_exprs() -> list[pl.Expr]:
    """``_etwrite.c``'s S_* codes: protobuf type, on_gpu, comm_type, inputs and outputs present,
    peer mode (1 send, 2 receive, 0 other); -1 for null / none."""
    send, recv = cv.NODE_TYPE_TO_PB["COMM_SEND"], cv.NODE_TYPE_TO_PB["COMM_RECV"]
    ptype = pl.col("node_type").replace_strict(cv.NODE_TYPE_TO_PB, default=None, return_dtype=pl.Int8)
    comm = pl.col("coll_type").replace_strict(cv.COLL_TO_COMM_TYPE, default=None, return_dtype=pl.Int8)
    return [
        ptype.fill_null(-1),
        pl.col("on_gpu").cast(pl.Int8).fill_null(-1),
        comm.fill_null(-1),
        pl.col("inputs").is_not_null().cast(pl.Int8),
        pl.col("outputs").is_not_null().cast(pl.Int8),
        pl.when(ptype == send).then(1).when(ptype == recv).then(2).otherwise(0).cast(pl.Int8),
    ]


def _string_exprs() -> list[pl.Expr]:
    """The string columns in ``_etwrite.c``'s C_* order, less C_SPLITS (bytes made in Python)."""
    coll_str = pl.when(~pl.col("coll_type").is_in(list(cv.COLL_TO_COMM_TYPE))).then(pl.col("coll_type"))
    io = [pl.col(f).struct.field(sub) for f in ("inputs", "outputs") for sub in _IO_SUBS]
    return [pl.col("name"), *io, pl.col("pg_name"), coll_str, *(pl.col(c) for c in cv.NODE_STR_ATTRS)]


@functools.cache
def _select() -> tuple[list[pl.Expr], int, int, int]:
    """The expressions of a batch's arrays: integers (nulls as 0), their null flags, the small
    codes, the string columns' null flags, the string columns; and the counts of the first three."""
    strs = _string_exprs()
    small = _small_exprs()
    exprs = [
        *(pl.col(c).cast(pl.Int64).fill_null(0).alias(f"i{k}") for k, c in enumerate(_INT_COLS)),
        *(pl.col(c).is_null().alias(f"n{k}") for k, c in enumerate(_INT_COLS)),
        *(e.alias(f"s{k}") for k, e in enumerate(small)),
        *(e.is_null().alias(f"z{k}") for k, e in enumerate(strs)),
        *(e.cast(pl.String).alias(f"t{k}") for k, e in enumerate(strs)),
    ]
    return exprs, len(_INT_COLS), len(small), len(strs)


class _Columns:
    """One batch of rows as the arrays ``et_encode_nodes`` reads (kept alive for its calls)."""

    def __init__(self, b: pl.DataFrame, splits: list[bytes | None]) -> None:
        exprs, ni, ns, nt = _select()
        cols = b.select(exprs)
        self.ints = np.ascontiguousarray(cols[:, :ni].to_numpy().T)
        self.int_null = np.ascontiguousarray(cols[:, ni : 2 * ni].to_numpy().T).view(np.uint8)
        k = 2 * ni + ns
        self.small = np.ascontiguousarray(cols[:, 2 * ni : k].to_numpy().T)
        self.str_null = list(np.ascontiguousarray(cols[:, k : k + nt].to_numpy().T).view(np.uint8))
        bufs = [_string_buffers(c) for c in cols[:, k + nt :].get_columns()]
        split_off, split_data = _table([x or b"" for x in splits])
        at = _C_SPLITS
        bufs.insert(at, (split_off, split_data))
        self.str_null.insert(at, np.array([x is None for x in splits], dtype=np.uint8))
        self.str_off = [o for o, _ in bufs]
        self.str_data = [d for _, d in bufs]
        n = len(bufs)
        self._arrays = [
            (_P * n)(*[a.ctypes.data for a in arrs]) for arrs in (self.str_off, self.str_data, self.str_null)
        ]
        self.ptrs = tuple(ctypes.addressof(a) for a in self._arrays)


def _splits(b: pl.DataFrame) -> list[bytes | None]:
    """Per row: the split-list attributes as protobuf writes them (None where there are none)."""
    out: list[bytes | None] = [None] * b.height
    has = b.select(pl.col("in_split").is_not_null() | pl.col("out_split").is_not_null()).to_series()
    idx = has.arg_true().to_list()
    if idx:
        for i, ins, outs in zip(
            idx, b["in_split"].gather(idx).to_list(), b["out_split"].gather(idx).to_list(), strict=True
        ):
            n = pb.Node()
            pbattrs.add_splits(n.attr.add, ins, outs)
            out[i] = n.SerializeToString()
    return out


#: the JSON value types whose attribute bytes are cached by value (floats are not: 0.0 == -0.0)
_CACHED = (bool, int, str)


def _extra_bytes(text: str, cache: dict[tuple[str, type, Any], bytes]) -> bytes:
    """The attributes of one ``attrs`` text as protobuf serializes them (``pbattrs.add_extra_attrs``),
    each (name, scalar value) serialized once per batch: the texts of a trace share most pairs."""
    items, raw = pbattrs.extra_items(text)
    parts = []
    for name, value in items:
        key = (name, type(value), value) if type(value) in _CACHED else None
        b = cache.get(key) if key is not None else None
        if b is None:
            n = pb.Node()
            pbattrs.add_value(n.attr, name, value)
            b = n.SerializeToString()
            if key is not None:
                cache[key] = b
        parts.append(b)
    if raw:
        n = pb.Node()
        pbattrs.add_raw_attrs(n, text)
        parts.append(n.SerializeToString())
    return b"".join(parts)


def _extra(s: pl.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(per-row index into the table, offsets, data) of the ``attrs`` attributes, encoded once per
    distinct text; index -1 where ``attrs`` is null."""
    uniq = s.drop_nulls().unique(maintain_order=True)
    codes = s.cast(pl.Enum(uniq)).to_physical().cast(pl.Int64).fill_null(-1).to_numpy()
    cache: dict[tuple[str, type, Any], bytes] = {}
    off, data = _table([_extra_bytes(text, cache) for text in uniq.to_list()])
    return np.ascontiguousarray(codes), off, data


def available() -> bool:
    """True unless ``CHARLLM_TRACE_NATIVE=0`` asks for the protobuf path (the tests' oracle);
    raises ``NativeModuleMissing`` (one line) when the compiled module is missing or broken."""
    return _native.lib() is not None


def _word(v: Any) -> int:
    """A field of ``et_rows`` as a 64-bit word: an array's address, or an integer."""
    if isinstance(v, np.ndarray):
        assert v.flags.c_contiguous
        return v.ctypes.data
    return int(v) & 0xFFFFFFFFFFFFFFFF


def write_nodes(
    write: Callable[[bytes], Any],
    trace: Trace,
    dep_rows: np.ndarray,
    deps: pl.DataFrame,
    batch: int,
) -> None:
    """Write every node of ``trace`` (checked by the caller) as length-prefixed Node messages.

    ``dep_rows``/``deps``: the dependencies sorted by their node's row (``deps`` has ``dep`` and
    ``kind``), as ``writer._sorted_deps`` gives them."""
    so = _native.lib()
    if so is None:
        raise RuntimeError(
            "write_nodes needs the C encoder (CHARLLM_TRACE_NATIVE=0 selects the protobuf path)"
        )
    nodes = trace.nodes
    dvals = deps["dep"].to_numpy()
    is_ctrl = (deps["kind"] == "ctrl").to_numpy()
    dep_kind = {"ctrl": (dep_rows[is_ctrl], dvals[is_ctrl]), "data": (dep_rows[~is_ctrl], dvals[~is_ctrl])}
    poff, pdata = _piece_table()
    buf = np.empty(8 << 20, dtype=np.uint8)
    written = ctypes.c_int64(0)
    rank = trace.meta.rank
    for b0 in range(0, nodes.height, batch):
        b = nodes.slice(b0, batch)
        n = b.height
        cols = _Columns(b, _splits(b))
        coff, cval = _csr(*dep_kind["ctrl"], b0, n)
        doff, dval = _csr(*dep_kind["data"], b0, n)
        ecode, eoff, edata = _extra(b["attrs"])
        fields = {
            "n": n, "ints": cols.ints, "int_null": cols.int_null, "n_int_attrs": len(cv.NODE_INT_ATTRS),
            "small": cols.small, "str_off": cols.ptrs[0], "str_data": cols.ptrs[1], "str_null": cols.ptrs[2],
            "n_str_attrs": len(cv.NODE_STR_ATTRS), "ctrl_off": coff, "ctrl": cval, "data_off": doff, "data": dval,
            "extra_code": ecode, "extra_off": eoff, "extra_data": edata, "piece_off": poff, "piece_data": pdata,
            "rank": 0 if rank is None else rank, "has_rank": rank is not None,
        }  # fmt: skip
        desc = np.array([_word(fields[f]) for f in _native.ET_ROWS], dtype=np.uint64)
        row = 0
        while row < n:
            nxt = so.et_encode_nodes(desc.ctypes.data, row, buf.ctypes.data, buf.size, ctypes.byref(written))
            if nxt == row:  # one node larger than the buffer
                buf = np.empty(buf.size * 2, dtype=np.uint8)
                continue
            write(memoryview(buf)[: written.value])
            row = nxt
