"""Zero-copy string columns: hand polars (offset, length) slices of one byte buffer.

A Chakra ET holds millions of strings (names, tensor shapes) at known offsets
in the file. Copying them one by one into Python strings is what makes
protobuf readers slow. Arrow's *binary view* layout describes exactly what we
have: per string a 16-byte view (length, 4-byte prefix, buffer index, offset),
short strings (<= 12 bytes) inline. We build the views with numpy and give
them to polars through the Arrow C Data Interface (PyCapsule protocol); polars
keeps a reference to the byte buffer, no string is copied. ``to_utf8`` then
validates the bytes as UTF-8 (polars raises on invalid text).
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import threading
from typing import Any

import numpy as np
import polars as pl

# Buffers are windows of the data: window k starts at k * _STEP and is at most
# 2 * _STEP long, so every string that starts in [k*_STEP, (k+1)*_STEP) and is
# shorter than _STEP lies inside window k (view offsets are int32).
_STEP = 1 << 30


class _ArrowSchema(ctypes.Structure):
    pass


class _ArrowArray(ctypes.Structure):
    pass


_SchemaRelease = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowSchema))
_ArrayRelease = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowArray))

_ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", _SchemaRelease),
    ("private_data", ctypes.c_void_p),
]
_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.c_void_p),
    ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", _ArrayRelease),
    ("private_data", ctypes.c_void_p),
]

_FORMAT_BINARY_VIEW = b"vz"
_FORMAT_UTF8_VIEW = b"vu"
_NAME = b""
_CAPSULE_SCHEMA = b"arrow_schema"
_CAPSULE_ARRAY = b"arrow_array"

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

# Everything a live export needs (structs, numpy buffers), by private_data key.
_LIVE_ARRAYS: dict[int, Any] = {}
_LIVE_SCHEMAS: dict[int, Any] = {}
_LOCK = threading.Lock()
_KEYS = itertools.count(1)


def _release_schema(ptr: Any) -> None:
    ptr.contents.release = _SchemaRelease()
    with _LOCK:
        _LIVE_SCHEMAS.pop(int(ptr.contents.private_data or 0), None)


def _release_array(ptr: Any) -> None:
    ptr.contents.release = _ArrayRelease()
    with _LOCK:
        _LIVE_ARRAYS.pop(int(ptr.contents.private_data or 0), None)


_RELEASE_SCHEMA = _SchemaRelease(_release_schema)
_RELEASE_ARRAY = _ArrayRelease(_release_array)


class _Export:
    """An object with ``__arrow_c_array__`` for one array made of our buffers (no children).

    ``keep`` holds everything the buffers live in until polars releases the array.
    """

    def __init__(self, fmt: bytes, n: int, null_count: int, ptrs: list[int], keep: tuple) -> None:
        self._buffers = (ctypes.c_void_p * len(ptrs))(*[p or None for p in ptrs])
        key = next(_KEYS)
        self.schema = _ArrowSchema(
            format=fmt,
            name=_NAME,
            metadata=None,
            flags=2,  # nullable
            n_children=0,
            children=None,
            dictionary=None,
            release=_RELEASE_SCHEMA,
            private_data=key,
        )
        self.array = _ArrowArray(
            length=n,
            null_count=null_count,
            offset=0,
            n_buffers=len(ptrs),
            n_children=0,
            buffers=ctypes.cast(self._buffers, ctypes.c_void_p),
            children=None,
            dictionary=None,
            release=_RELEASE_ARRAY,
            private_data=key,
        )
        with _LOCK:
            _LIVE_ARRAYS[key] = (keep, self._buffers)
            _LIVE_SCHEMAS[key] = True

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]:
        return (
            _PyCapsule_New(ctypes.addressof(self.schema), _CAPSULE_SCHEMA, None),
            _PyCapsule_New(ctypes.addressof(self.array), _CAPSULE_ARRAY, None),
        )

    def close(self) -> None:
        """Release whatever polars did not take over (it moves the structs it imports)."""
        if self.array.release:
            self.array.release(ctypes.pointer(self.array))
        if self.schema.release:
            self.schema.release(ctypes.pointer(self.schema))

    def series(self, name: str) -> pl.Series:
        try:
            return pl.Series(name, self).alias(name)
        finally:
            self.close()


def _validity(present: np.ndarray | None) -> tuple[np.ndarray | None, int]:
    """(Arrow validity bitmap or None, null count) of a boolean mask."""
    if present is None:
        return None, 0
    nulls = len(present) - int(np.count_nonzero(present))
    if nulls == 0:
        return None, 0
    return np.packbits(present, bitorder="little"), nulls


class _ViewExport(_Export):
    """One binary-view (or string-view) array: ``views`` (16 bytes per row) into ``data``."""

    def __init__(
        self,
        views: np.ndarray,
        data: np.ndarray,
        n: int,
        fmt: bytes = _FORMAT_BINARY_VIEW,
        valid: np.ndarray | None = None,
        null_count: int = 0,
    ) -> None:
        nbuf = max(1, (len(data) + _STEP - 1) // _STEP)
        windows = [data[k * _STEP : min(len(data), k * _STEP + 2 * _STEP)] for k in range(nbuf)]
        sizes = np.array([len(w) for w in windows], dtype=np.int64)
        ptrs = [0 if valid is None else valid.ctypes.data, views.ctypes.data]
        ptrs += [w.ctypes.data for w in windows] + [sizes.ctypes.data]
        super().__init__(fmt, n, null_count, ptrs, (views, data, windows, sizes, valid))


_PRIMITIVE_FORMATS = {np.dtype(np.int64): b"l", np.dtype(np.int32): b"i", np.dtype(np.uint8): b"C"}


def primitive_column(name: str, values: np.ndarray, present: np.ndarray | None = None) -> pl.Series:
    """A numeric (or, for a bool array, Boolean) series of ``values``, null where ``present`` is False.

    The values are handed over without a copy (a bool array is packed into bits first).
    """
    valid, nulls = _validity(present)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return _Export(
            b"b",
            len(values),
            nulls,
            [0 if valid is None else valid.ctypes.data, bits.ctypes.data],
            (bits, valid),
        ).series(name)
    values = np.ascontiguousarray(values)
    fmt = _PRIMITIVE_FORMATS[values.dtype]
    ptrs = [0 if valid is None else valid.ctypes.data, values.ctypes.data]
    return _Export(fmt, len(values), nulls, ptrs, (values, valid)).series(name)


def view_column(
    views: np.ndarray, data: np.ndarray, name: str = "", present: np.ndarray | None = None
) -> pl.Series:
    """A String series from ready binary views into ``data`` (already checked as UTF-8)."""
    n = len(views)
    if n == 0:
        return pl.Series(name, [], dtype=pl.String)
    valid, nulls = _validity(present)
    return _ViewExport(views, data, n, _FORMAT_UTF8_VIEW, valid, nulls).series(name)


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


def _window(data: np.ndarray, width: int) -> np.ndarray:
    """Overlapping rows: row i is data[i : i + width] (data must be padded by width bytes)."""
    return np.lib.stride_tricks.as_strided(data, shape=(len(data) - width + 1, width), strides=(1, 1))


def _views_numpy(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    n = len(starts)
    views = np.zeros((n, 16), dtype=np.uint8)
    head = _window(data, 12)[starts]  # first 12 bytes of every string
    short = lengths <= 12
    # inline strings: zero the bytes past their end
    keep = np.arange(12)[None, :] < lengths[:, None]
    head[short] *= keep[short]
    views[:, 4:16] = head
    v32 = views.view(np.int32)
    v32[:, 0] = lengths
    long_ = ~short
    ls = starts[long_]
    v32[long_, 2] = ls // _STEP
    v32[long_, 3] = ls % _STEP
    return views


def binary_column(
    data: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    name: str = "",
    *,
    _fmt: bytes = _FORMAT_BINARY_VIEW,
) -> pl.Series:
    """A polars Binary series whose row i is ``data[starts[i] : starts[i] + lengths[i]]``.

    Every slice must lie inside ``data`` (the caller checks this); without the C
    scanner ``data`` must also be padded by 16 zero bytes.
    """
    n = len(starts)
    if n == 0:
        return pl.Series(name, [], dtype=pl.Binary if _fmt == _FORMAT_BINARY_VIEW else pl.String)
    starts = starts.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    if lengths.max(initial=0) >= _STEP:
        raise ValueError("a string of 1 GiB or more")
    from charllm_trace.et import _native

    so = _native.lib()
    if so is not None:
        views = alloc((n, 16), np.uint8, populate=True)
        starts = np.ascontiguousarray(starts)
        lengths = np.ascontiguousarray(lengths)
        so.et_views(data.ctypes.data, starts.ctypes.data, lengths.ctypes.data, n, views.ctypes.data, _STEP)
    else:
        views = _views_numpy(data, starts, lengths)
    export = _ViewExport(views, data, n, _fmt)
    try:
        s = pl.Series(name, export)
    finally:
        export.close()
    return s


class InvalidUtf8(ValueError):
    """Row ``row`` of a string column is not valid UTF-8."""

    def __init__(self, row: int) -> None:
        self.row = row
        super().__init__(f"row {row} is not valid UTF-8")


def _first_invalid_utf8_numpy(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int:
    """Index of the first slice that is not strict UTF-8, or -1 (needs a padded ``data``).

    Slices are checked together, 32 MiB at a time: each is followed by a NUL byte, so
    a sequence cut at a slice's end (or a continuation byte at its start) stays invalid.
    """
    n = len(starts)
    step = 32 << 20
    ends = np.cumsum(lengths + 1)
    cuts = np.searchsorted(ends, np.arange(step, int(ends[-1]) if n else 0, step), side="right")
    edges = sorted({0, n, *cuts.tolist()})
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        ln = lengths[a:b] + 1
        first = np.cumsum(ln) - ln
        idx = np.repeat(starts[a:b] - first, ln) + np.arange(int(ln.sum()), dtype=np.int64)
        chunk = data[idx]
        chunk[first + ln - 1] = 0
        try:
            chunk.tobytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            return a + int(np.searchsorted(first, exc.start, side="right")) - 1
    return -1


def first_invalid_utf8(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int:
    """Index of the first slice that is not strict UTF-8, or -1 (C scanner, else Python's decoder)."""
    from charllm_trace.et import _native

    if not len(starts):
        return -1
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    so = _native.lib()
    if so is not None:
        return int(so.et_utf8(data.ctypes.data, starts.ctypes.data, lengths.ctypes.data, len(starts)))
    return _first_invalid_utf8_numpy(data, starts, lengths)


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
    return binary_column(data, starts, lengths, name, _fmt=_FORMAT_UTF8_VIEW)


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
