"""Zero-copy columns: hand polars numpy buffers, and (offset, length) slices of one byte buffer.

A Chakra ET holds millions of strings (names, tensor shapes) at known offsets
in the file. Copying them one by one into Python strings is what makes
protobuf readers slow. Arrow's *binary view* layout describes exactly what we
have: per string a 16-byte view (length, 4-byte prefix, buffer index, offset),
short strings (<= 12 bytes) inline. The C scanner writes the views; pyarrow
wraps them and the byte buffer (``pa.py_buffer``: no copy, the numpy arrays stay
alive as long as an Arrow buffer refers to them) and polars imports the arrays
through the Arrow C Data Interface. No Arrow structure or release callback is
written here: pyarrow owns them (docs/native.md: why pyarrow and not nanoarrow).
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from charllm_trace.et import _native

#: Buffers are windows of the data: window k starts at k * STEP and is at most 2 * STEP long,
#: so every string that starts in [k*STEP, (k+1)*STEP) and is shorter than STEP lies inside
#: window k (view offsets are int32).
STEP = 1 << 30


def _buffer(a: np.ndarray | None) -> pa.Buffer | None:
    """A pyarrow buffer over ``a`` without a copy (it keeps ``a`` alive as long as it lives)."""
    return None if a is None else pa.py_buffer(a)


def _validity(present: np.ndarray | None) -> tuple[np.ndarray | None, int]:
    """(Arrow validity bitmap or None, null count) of a boolean mask."""
    if present is None:
        return None, 0
    nulls = len(present) - int(np.count_nonzero(present))
    if nulls == 0:
        return None, 0
    return np.packbits(present, bitorder="little"), nulls


class _Handoff:
    """``arr`` seen only through the Arrow PyCapsule protocol: polars imports it directly, where a
    ``pa.Array`` would take its pyarrow conversion path (which loads ``pyarrow.compute``: ~40-90 ms
    per process, measured on a 3,664-node ET)."""

    __slots__ = ("arr",)

    def __init__(self, arr: pa.Array) -> None:
        self.arr = arr

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        return self.arr.__arrow_c_array__(requested_schema)


def to_series(name: str, arr: pa.Array) -> pl.Series:
    """The polars series of a pyarrow array, zero-copy (pyarrow owns the structures and buffers)."""
    return pl.Series(name, _Handoff(arr)).alias(name)


_PRIMITIVE_TYPES = {
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.uint8): pa.uint8(),
}


def primitive_column(name: str, values: np.ndarray, present: np.ndarray | None = None) -> pl.Series:
    """A numeric (or, for a bool array, Boolean) series of ``values``, null where ``present`` is False.

    The values are handed over without a copy (a bool array is packed into bits first).
    """
    valid, nulls = _validity(present)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        arr = pa.Array.from_buffers(
            pa.bool_(), len(values), [_buffer(valid), _buffer(bits)], null_count=nulls
        )
        return to_series(name, arr)
    values = np.ascontiguousarray(values)
    typ = _PRIMITIVE_TYPES[values.dtype]
    return to_series(
        name, pa.Array.from_buffers(typ, len(values), [_buffer(valid), _buffer(values)], null_count=nulls)
    )


def _view_array(
    views: np.ndarray,
    data: np.ndarray,
    typ: pa.DataType,
    valid: np.ndarray | None = None,
    null_count: int = 0,
) -> pa.Array:
    """A binary-view (or string-view) array: ``views`` (16 bytes per row) into windows of ``data``."""
    nbuf = max(1, (len(data) + STEP - 1) // STEP)
    windows = [_buffer(data[k * STEP : min(len(data), k * STEP + 2 * STEP)]) for k in range(nbuf)]
    return pa.Array.from_buffers(
        typ, len(views), [_buffer(valid), _buffer(views), *windows], null_count=null_count
    )


def view_column(
    views: np.ndarray, data: np.ndarray, name: str = "", present: np.ndarray | None = None
) -> pl.Series:
    """A String series from ready binary views into ``data`` (already checked as UTF-8)."""
    if len(views) == 0:
        return pl.Series(name, [], dtype=pl.String)
    valid, nulls = _validity(present)
    return to_series(name, _view_array(views, data, pa.string_view(), valid, nulls))


def alloc(shape: int | tuple[int, ...], dtype: Any, *, populate: bool = False) -> np.ndarray:
    """An uninitialised array; large ones come from an anonymous mapping.

    numpy asks the kernel for transparent huge pages on large arrays; on a busy
    machine each huge-page fault can stall on memory compaction, which made
    page faults the largest cost of decoding. Plain pages, pre-faulted in one
    call when the whole array will be written (``populate``), are cheaper.
    """
    shape_t = (int(shape),) if np.ndim(shape) == 0 else tuple(int(x) for x in shape)  # type: ignore[union-attr]
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape_t, dtype=np.int64)) * dt.itemsize
    if nbytes < (4 << 20):
        return np.empty(shape_t, dtype=dt)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if populate:
        flags |= getattr(mmap, "MAP_POPULATE", 0)
    m = mmap.mmap(-1, nbytes, flags=flags)
    return np.frombuffer(m, dtype=dt).reshape(shape_t)


def _views(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The 16-byte Arrow views of ``data`` slices: the C scanner's, or (``CHARLLM_TRACE_NATIVE=0``,
    the tests' switch) the numpy oracle's."""
    n = len(starts)
    so = _native.lib()
    if so is None:
        from charllm_trace.et.oracle import views_numpy

        return views_numpy(data, starts, lengths)
    views = alloc((n, 16), np.uint8, populate=True)
    so.et_views(data.ctypes.data, starts.ctypes.data, lengths.ctypes.data, n, views.ctypes.data, STEP)
    return views


def binary_column(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, name: str = "", *, string: bool = False
) -> pl.Series:
    """A polars Binary (``string``: String) series whose row i is ``data[starts[i] : starts[i] + lengths[i]]``.

    Every slice must lie inside ``data`` (the caller checks this); a String column's bytes must
    have been checked as UTF-8 (:func:`utf8_column` does both). No byte is copied.
    """
    n = len(starts)
    if n == 0:
        return pl.Series(name, [], dtype=pl.String if string else pl.Binary)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if lengths.max(initial=0) >= STEP:
        raise ValueError("a string of 1 GiB or more")
    views = _views(data, starts, lengths)
    return to_series(name, _view_array(views, data, pa.string_view() if string else pa.binary_view()))


class InvalidUtf8(ValueError):
    """Row ``row`` of a string column is not valid UTF-8."""

    def __init__(self, row: int) -> None:
        self.row = row
        super().__init__(f"row {row} is not valid UTF-8")


def first_invalid_utf8(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int:
    """Index of the first slice that is not strict UTF-8, or -1 (the C scanner; the numpy oracle
    with ``CHARLLM_TRACE_NATIVE=0``)."""
    if not len(starts):
        return -1
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    so = _native.lib()
    if so is None:
        from charllm_trace.et.oracle import first_invalid_utf8_numpy

        return first_invalid_utf8_numpy(data, starts, lengths)
    return int(so.et_utf8(data.ctypes.data, starts.ctypes.data, lengths.ctypes.data, len(starts)))


def utf8_column(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, name: str = "", *, validated: bool = False
) -> pl.Series:
    """A String series of ``data`` slices (zero-copy views); raises :class:`InvalidUtf8`.

    The bytes are checked as strict UTF-8 first (unless the caller already did), then
    handed to polars as string views.
    """
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if not validated:
        bad = first_invalid_utf8(data, starts, lengths)
        if bad >= 0:
            raise InvalidUtf8(bad)
    return binary_column(data, starts, lengths, name, string=True)


def enum_from_physical(phys: pl.Series, dtype: pl.DataType) -> pl.Series:
    """An Enum series from its physical codes (an unsigned integer series, every code valid).

    The codes become the column's physical values without a copy where polars can take them
    (``cat.to``, polars 2); otherwise they are gathered from the categories.
    """
    to = getattr(phys.cat, "to", None)
    if to is not None:
        try:
            return to(dtype)
        except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError, pl.exceptions.SchemaError):
            pass
    cats = pl.Series(phys.name, dtype.categories.to_list(), dtype=dtype)  # type: ignore[attr-defined]
    return cats.gather(phys.cast(pl.UInt32)).alias(phys.name)


def enum_column(codes: np.ndarray, dtype: pl.DataType, name: str = "") -> pl.Series:
    """An Enum series whose row i is category ``codes[i]`` of ``dtype`` (uint8 codes, all valid)."""
    return enum_from_physical(pl.Series(name, np.ascontiguousarray(codes, dtype=np.uint8)), dtype)
