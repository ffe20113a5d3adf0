"""Kineto events straight from JSON into column buffers, in C (``jd_decode`` in ``_jsondecode.c``).

One call per batch of framed events fills, for every complete event that is not the profiler's
own span: name and category codes (raw spellings interned in C across batches), pid, tid, the
five id args (int64 + valid flag), ts and dur in nanoseconds, and where its args object is in
the batch; and where the batch's metadata events (``ph`` "M": process names and labels) are. Only what C cannot decide is done here, per distinct value or per few rows: the
distinct names and categories are decoded by msgspec (escapes and all) into the reader's
vocabularies, and the args of the rows that may be communication (or are ``cuda_sync``) are
decoded by msgspec from their spans.

A batch with anything C is not certain to read exactly as the msgspec reader does (see the
comment above ``jd_decode``) comes back as ``None``: the caller decodes it with msgspec, which
gives the same columns or the same one-line error.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from charllm_trace.converters import jsonframe

#: the integer columns jd_decode fills, in its order
INT_COLUMNS = ("pid", "tid", "device", "stream", "correlation", "external_id", "rf_id")


@dataclass
class Batch:
    """The complete events of one batch as arrays (``n`` rows), plus the new vocabulary entries."""

    n_raw: int
    name: np.ndarray  # uint32 C codes
    cat: np.ndarray
    ints: np.ndarray  # int64 (7, n): INT_COLUMNS
    valid: np.ndarray  # bool (7, n)
    ts: np.ndarray  # int64 ns (no base)
    dur: np.ndarray
    args_off: np.ndarray  # int64 offset of the args object in the batch, -1 for none
    args_len: np.ndarray
    new_names: list[Any]  # decoded values of the names first seen in this batch (None: missing/null)
    new_cats: list[Any]
    meta: bytes | None = None  # the batch's metadata events (ph "M") as a JSON list, if any


def decoder() -> NativeDecoder | None:
    """A decoder when the compiled module is usable, else None (the msgspec reader is used)."""
    so = jsonframe.lib()
    if so is None or not hasattr(so, "jd_decode"):
        return None
    return NativeDecoder(so)


class NativeDecoder:
    """One Kineto file's decoding state in C (the interned names and categories)."""

    def __init__(self, so: ctypes.CDLL) -> None:
        self.so = so
        self.handle = so.jd_new()
        if not self.handle:
            raise MemoryError("jd_new")

    def close(self) -> None:
        if self.handle:
            self.so.jd_free(self.handle)
            self.handle = None

    def decode(self, data: Any, count: int) -> Batch | None:
        """Decode the JSON list ``data`` (bytes or a buffer) of at most ``count`` events; None when
        the batch must be decoded by msgspec instead."""
        arr = np.frombuffer(data, dtype=np.uint8)
        cap = max(int(count), 1)
        name = np.empty(cap, np.uint32)
        cat = np.empty(cap, np.uint32)
        ints = np.empty((7, cap), np.int64)
        valid = np.empty((7, cap), np.uint8)
        ts = np.empty(cap, np.int64)
        dur = np.empty(cap, np.int64)
        aoff = np.empty(cap, np.int64)
        alen = np.empty(cap, np.int64)
        new_off = np.empty(2 * cap, np.int64)
        new_len = np.empty(2 * cap, np.int64)
        new_which = np.empty(2 * cap, np.uint8)
        meta_off = np.empty(cap, np.int64)
        meta_len = np.empty(cap, np.int64)
        info = np.zeros(int(self.so.jd_info_len()), np.int64)
        rows = self.so.jd_decode(
            self.handle,
            arr.ctypes.data,
            arr.size,
            cap,
            name.ctypes.data,
            cat.ctypes.data,
            ints.ctypes.data,
            valid.ctypes.data,
            ts.ctypes.data,
            dur.ctypes.data,
            aoff.ctypes.data,
            alen.ctypes.data,
            new_off.ctypes.data,
            new_len.ctypes.data,
            new_which.ctypes.data,
            2 * cap,
            meta_off.ctypes.data,
            meta_len.ctypes.data,
            info.ctypes.data,
        )
        if rows < 0:
            return None
        n_new = int(info[1])
        n_meta = int(info[2])
        new: tuple[list[Any], list[Any]] = ([], [])
        for off, ln, which in zip(
            new_off[:n_new].tolist(), new_len[:n_new].tolist(), new_which[:n_new].tolist(), strict=True
        ):
            new[which].append(None if off < 0 else msgspec.json.decode(arr[off : off + ln]))
        return Batch(
            n_raw=int(info[0]),
            name=name[:rows],
            cat=cat[:rows],
            ints=ints[:, :rows],
            valid=valid[:, :rows].astype(bool),
            ts=ts[:rows],
            dur=dur[:rows],
            args_off=aoff[:rows],
            args_len=alen[:rows],
            new_names=new[0],
            new_cats=new[1],
            meta=_json_list(arr, meta_off[:n_meta], meta_len[:n_meta]) if n_meta else None,
        )


def _json_list(arr: np.ndarray, off: np.ndarray, length: np.ndarray) -> bytes:
    """The JSON values at ``off``/``length`` in ``arr`` as one JSON list."""
    parts = [bytes(arr[o : o + n]) for o, n in zip(off.tolist(), length.tolist(), strict=True)]
    return b"[" + b",".join(parts) + b"]"
