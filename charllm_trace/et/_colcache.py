"""A memory-mapped columnar file for polars frames: written once, re-opened without copying.

polars' own IPC reader copies every buffer into memory, which for a large trace
(a million nodes, fifty million dependencies) costs as much as decoding the ET.
This format keeps each column's Arrow buffers, 64-byte aligned, in one data
file plus a JSON description; re-opening maps the file and hands polars the
buffers through the Arrow C Data Interface, so nothing is copied or parsed.
Buffers shared by several columns (string views into one byte buffer) are
stored once.

Supported column types are the ones the trace model uses: integers, floats,
booleans, strings (views or offsets), enums (stored as their codes), lists and
structs of them.

Nothing read back is trusted: the description carries its own CRC-32 (a second
line), the size and CRC-32 of the data file, and every buffer is checked to lie
inside the data file before polars sees a pointer. A file that fails any check
raises :class:`Corrupt` (a truncated, flipped, emptied or edited file is an
exception, never a wild pointer).
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import polars as pl

from charllm_trace.et._arrow import (
    _ArrayRelease,
    _ArrowArray,
    _ArrowSchema,
    _PyCapsule_New,
    _SchemaRelease,
    enum_from_physical,
)

FORMAT_VERSION = 2
ALIGN = 64

_ITEM = {"c": 1, "C": 1, "s": 2, "S": 2, "i": 4, "I": 4, "l": 8, "L": 8, "e": 2, "f": 4, "g": 8}


class _ArrowArrayStream(ctypes.Structure):
    pass


_GetSchema = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_ArrowArrayStream), ctypes.POINTER(_ArrowSchema))
_GetNext = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_ArrowArrayStream), ctypes.POINTER(_ArrowArray))
_GetError = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.POINTER(_ArrowArrayStream))
_StreamRelease = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowArrayStream))
_ArrowArrayStream._fields_ = [
    ("get_schema", _GetSchema),
    ("get_next", _GetNext),
    ("get_last_error", _GetError),
    ("release", _StreamRelease),
    ("private_data", ctypes.c_void_p),
]

_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_GetPointer.restype = ctypes.c_void_p
_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Unsupported(Exception):
    """A column type this format does not store."""


class Corrupt(Exception):
    """A stored frame that fails its checks (size, checksum, bounds): never opened."""


def seal(obj: Any) -> bytes:
    """``obj`` as JSON followed by a line with the CRC-32 of the JSON bytes."""
    body = orjson.dumps(obj, default=str)
    return body + b"\n" + f"{zlib.crc32(body):08x}".encode()


def unseal(raw: bytes, what: str = "description") -> Any:
    """The object :func:`seal` wrote; :class:`Corrupt` when the checksum or JSON is wrong."""
    body, sep, crc = raw.rpartition(b"\n")
    if not sep or crc.strip() != f"{zlib.crc32(body):08x}".encode():
        raise Corrupt(f"{what}: checksum mismatch")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Corrupt(f"{what}: {exc}") from None


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------


class _Writer:
    def __init__(self, f: Any, crc: int) -> None:
        self.f = f
        self.pos = 0
        self.crc = crc
        self.seen: dict[tuple[int, int], int] = {}

    def buffer(self, addr: int, size: int) -> list[int] | None:
        if not addr:
            return None
        key = (addr, size)
        if key in self.seen:
            return [self.seen[key], size]
        pad = (-self.pos) % ALIGN
        if pad:
            self.f.write(b"\0" * pad)
            self.crc = zlib.crc32(b"\0" * pad, self.crc)
            self.pos += pad
        at = self.pos
        if size:
            view = memoryview((ctypes.c_char * size).from_address(addr)).cast("B")
            self.f.write(view)
            self.crc = zlib.crc32(view, self.crc)
        self.pos += size
        self.seen[key] = at
        return [at, size]


def _describe(schema: _ArrowSchema, arr: _ArrowArray, w: _Writer) -> dict[str, Any]:
    fmt = schema.format.decode()
    if schema.dictionary:
        raise Unsupported("dictionary-encoded column")
    n = arr.offset + arr.length
    bufs = ctypes.cast(arr.buffers, ctypes.POINTER(ctypes.c_void_p)) if arr.n_buffers else None

    def b(i: int) -> int:
        return bufs[i] or 0 if bufs is not None else 0

    sizes: list[int] = []
    if fmt in _ITEM:
        sizes = [(n + 7) // 8, _ITEM[fmt] * n]
    elif fmt == "b":
        sizes = [(n + 7) // 8, (n + 7) // 8]
    elif fmt in ("vu", "vz"):
        nvar = arr.n_buffers - 3
        var_sizes = (
            np.ctypeslib.as_array(ctypes.cast(b(arr.n_buffers - 1), ctypes.POINTER(ctypes.c_int64)), (nvar,))
            if nvar
            else []
        )
        sizes = [(n + 7) // 8, 16 * n, *[int(x) for x in var_sizes], 8 * nvar]
    elif fmt in ("u", "z", "U", "Z"):
        width = 4 if fmt in ("u", "z") else 8
        ctype = ctypes.c_int32 if width == 4 else ctypes.c_int64
        end = ctypes.cast(b(1), ctypes.POINTER(ctype))[n] if b(1) else 0
        sizes = [(n + 7) // 8, width * (n + 1), int(end)]
    elif fmt in ("+l", "+L"):
        sizes = [(n + 7) // 8, (4 if fmt == "+l" else 8) * (n + 1)]
    elif fmt == "+s":
        sizes = [(n + 7) // 8]
    elif fmt == "n":
        sizes = []
    else:
        raise Unsupported(f"column format {fmt!r}")
    if len(sizes) != arr.n_buffers:
        raise Unsupported(f"column format {fmt!r} with {arr.n_buffers} buffers")
    children = []
    if arr.n_children:
        sch = ctypes.cast(schema.children, ctypes.POINTER(ctypes.POINTER(_ArrowSchema)))
        ach = ctypes.cast(arr.children, ctypes.POINTER(ctypes.POINTER(_ArrowArray)))
        children = [_describe(sch[i].contents, ach[i].contents, w) for i in range(arr.n_children)]
    return {
        "format": fmt,
        "name": (schema.name or b"").decode(),
        "flags": int(schema.flags),
        "length": int(arr.length),
        "null_count": int(arr.null_count),
        "offset": int(arr.offset),
        "buffers": [w.buffer(b(i), sizes[i]) for i in range(arr.n_buffers)],
        "children": children,
    }


def write_frame(df: pl.DataFrame, data_path: Path, meta_path: Path) -> None:
    """Store ``df`` as ``data_path`` (buffers) + ``meta_path`` (JSON description)."""
    cols = []
    # Every exported array stays alive until the whole frame is written: the writer stores a
    # buffer shared by several columns once, by address, and a buffer freed early (one polars
    # materialised for the export) could have its address reused by the next column's.
    held: list[Any] = []
    with open(data_path, "wb") as f:
        w = _Writer(f, zlib.crc32(b""))
        try:
            for name in df.columns:
                s = df[name].rechunk()
                enum = isinstance(s.dtype, pl.Enum)
                if enum:  # stored as its codes; the categories are in the schema
                    s = s.to_physical()
                cap = s.__arrow_c_stream__()
                stream = _ArrowArrayStream.from_address(_GetPointer(cap, b"arrow_array_stream"))
                sp = ctypes.pointer(stream)
                schema = _ArrowSchema()
                arr = _ArrowArray()
                held.append((s, cap, schema, arr))
                if stream.get_schema(sp, ctypes.byref(schema)) != 0:
                    raise Unsupported(f"cannot export column {name}")
                if stream.get_next(sp, ctypes.byref(arr)) != 0:
                    raise Unsupported(f"cannot export column {name}")
                if not arr.release:  # an empty stream: no chunk at all
                    cols.append({"name": name, "dtype": str(s.dtype), "empty": True})
                    continue
                desc = _describe(schema, arr, w)
                cols.append({"name": name, "array": desc, **({"enum": True} if enum else {})})
        finally:
            for _s, _cap, schema, arr in reversed(held):
                if arr.release:
                    arr.release(ctypes.pointer(arr))
                if schema.release:
                    schema.release(ctypes.pointer(schema))
            held.clear()
        data_size, data_crc = w.pos, w.crc
    meta = {
        "version": FORMAT_VERSION,
        "height": df.height,
        "schema": {k: str(v) for k, v in df.schema.items()},
        "columns": cols,
        "data_size": data_size,
        "data_crc32": data_crc,
    }
    meta_path.write_bytes(seal(meta))


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------

# Lifetime. polars may keep a buffer (or a slice of it, in a derived frame) for as long as it
# likes and calls the array's release callback when done. A Python (ctypes) callback there is
# unsafe: polars also drops frames during interpreter shutdown, where entering Python crashes
# the process (seen with an audit hook installed: SIGSEGV/SIGILL after the program's last line).
# So the callbacks are a native no-op, and what they would free is kept for the process's
# lifetime instead: the descriptions (a few hundred bytes per column) and the mappings, one per
# data file (deduplicated by file identity; read-only, file-backed pages the kernel can drop).
_LIVE: list[Any] = []
_MAPS: dict[tuple[int, int, int, int], Any] = {}
_LOCK = threading.Lock()
_KEYS = itertools.count(1)
_NOOP = ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value  # int getpid(void): no effect

_RA = _ArrayRelease(_NOOP)
_RS = _SchemaRelease(_NOOP)
_CA = _RA
_CS = _RS


def _build(
    desc: dict[str, Any], base: int, keep: list[Any], root: bool, key: int
) -> tuple[_ArrowSchema, _ArrowArray]:
    fmt = desc["format"].encode()
    name = desc["name"].encode()
    keep += [fmt, name]
    kids = [_build(c, base, keep, False, key) for c in desc["children"]]
    schema = _ArrowSchema(
        format=fmt,
        name=name,
        metadata=None,
        flags=desc["flags"],
        n_children=len(kids),
        children=None,
        dictionary=None,
        release=_RS if root else _CS,
        private_data=key,
    )
    bufs = desc["buffers"]
    ptrs = (ctypes.c_void_p * max(1, len(bufs)))(*[(base + b[0]) if b is not None else None for b in bufs])
    arr = _ArrowArray(
        length=desc["length"],
        null_count=desc["null_count"],
        offset=desc["offset"],
        n_buffers=len(bufs),
        n_children=len(kids),
        buffers=ctypes.cast(ptrs, ctypes.c_void_p),
        children=None,
        dictionary=None,
        release=_RA if root else _CA,
        private_data=key,
    )
    keep.append(ptrs)
    if kids:
        sch = (ctypes.POINTER(_ArrowSchema) * len(kids))(*[ctypes.pointer(k[0]) for k in kids])
        ach = (ctypes.POINTER(_ArrowArray) * len(kids))(*[ctypes.pointer(k[1]) for k in kids])
        schema.children = ctypes.cast(sch, ctypes.c_void_p)
        arr.children = ctypes.cast(ach, ctypes.c_void_p)
        keep += [sch, ach, kids]
    return schema, arr


class _Column:
    def __init__(self, desc: dict[str, Any], mm: Any, base: int) -> None:
        self.key = next(_KEYS)
        keep: list[Any] = [mm]
        self.schema, self.array = _build(desc, base, keep, True, self.key)
        with _LOCK:
            _LIVE.append((keep, self.schema, self.array))

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]:
        return (
            _PyCapsule_New(ctypes.addressof(self.schema), b"arrow_schema", None),
            _PyCapsule_New(ctypes.addressof(self.array), b"arrow_array", None),
        )

    def close(self) -> None:
        if self.array.release:
            self.array.release(ctypes.pointer(self.array))
        if self.schema.release:
            self.schema.release(ctypes.pointer(self.schema))


def _check_bounds(desc: Any, size: int, where: str) -> None:
    if not isinstance(desc, dict) or not isinstance(desc.get("buffers"), list):
        raise Corrupt(f"{where}: bad column description")
    for b in desc["buffers"]:
        if b is None:
            continue
        if (
            not isinstance(b, list)
            or len(b) != 2
            or not all(isinstance(x, int) and x >= 0 for x in b)
            or b[0] + b[1] > size
        ):
            raise Corrupt(f"{where}: buffer {b} outside the data file ({size} bytes)")
    for c in desc.get("children") or []:
        _check_bounds(c, size, where)


class CheckedFrame:
    """A stored frame whose description, data size, checksum and buffer bounds passed."""

    def __init__(self, meta: dict[str, Any], mm: Any, base: int) -> None:
        self.meta = meta
        self.mm = mm
        self.base = base

    def frame(self) -> pl.DataFrame:
        """The polars frame over the mapped buffers (zero-copy)."""
        meta = self.meta
        series = []
        for c in meta["columns"]:
            if c.get("empty"):
                series.append(pl.Series(c["name"], [], dtype=_dtype(meta["schema"][c["name"]])))
                continue
            col = _Column(c["array"], self.mm, self.base)
            try:
                s = pl.Series(c["name"], col)
            finally:
                col.close()
            if c.get("enum"):
                s = enum_from_physical(s, _dtype(meta["schema"][c["name"]]))
            series.append(s)
        df = pl.DataFrame(series)
        if df.height != meta["height"]:
            raise Corrupt("row count mismatch")
        return df


def check_frame(data_path: Path, meta_path: Path) -> CheckedFrame:
    """Map a frame stored by :func:`write_frame` and check it, building nothing yet.

    Raises :class:`Corrupt` when the description's or the data's checksum, the data file's
    size, any buffer's bounds or a column type is wrong. Check every frame of an entry
    before building any: a failure then never happens while polars holds mapped buffers."""
    meta = unseal(meta_path.read_bytes(), meta_path.name)
    if not isinstance(meta, dict) or meta.get("version") != FORMAT_VERSION:
        raise Corrupt(f"{meta_path.name}: not format version {FORMAT_VERSION}")
    size = os.path.getsize(data_path)
    if size != meta.get("data_size"):
        raise Corrupt(f"{data_path.name}: {size} bytes, expected {meta.get('data_size')}")
    try:
        for c in meta["columns"]:
            if c.get("empty") or c.get("enum"):
                _dtype(meta["schema"][c["name"]])
            if not c.get("empty"):
                _check_bounds(c["array"], size, data_path.name)
    except (KeyError, TypeError, Unsupported) as exc:
        raise Corrupt(f"{meta_path.name}: bad description ({exc})") from None
    if not size:
        if meta.get("data_crc32") != zlib.crc32(b""):
            raise Corrupt(f"{data_path.name}: checksum mismatch")
        return CheckedFrame(meta, None, 0)
    with open(data_path, "rb") as f:
        st = os.fstat(f.fileno())
        ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with _LOCK:
            known = _MAPS.get(ident)
        if known is not None:
            return CheckedFrame(meta, known, known[1].ctypes.data)  # checked when first mapped
        mm = mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    crc = zlib.crc32(mm)  # also brings the pages in: the analysis reads most of them anyway
    if crc != meta.get("data_crc32"):
        mm.close()
        raise Corrupt(f"{data_path.name}: checksum mismatch")
    arr = np.frombuffer(mm, dtype=np.uint8)
    kept = (mm, arr)
    with _LOCK:
        _MAPS.setdefault(ident, kept)
    return CheckedFrame(meta, kept, arr.ctypes.data)


def read_frame(data_path: Path, meta_path: Path) -> pl.DataFrame:
    """Open a frame stored by :func:`write_frame` (memory-mapped, zero-copy, checked first)."""
    return check_frame(data_path, meta_path).frame()


def _dtype(text: str) -> pl.DataType:
    from charllm_trace.model import DEP_SCHEMA, NODE_SCHEMA, TELEMETRY_SCHEMA

    for schema in (NODE_SCHEMA, DEP_SCHEMA, TELEMETRY_SCHEMA):
        for dt in schema.values():
            if str(dt) == text:
                return dt
    raise Unsupported(f"dtype {text}")
