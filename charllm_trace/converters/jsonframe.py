"""Streaming framing of a JSON document's top level, chunk by chunk.

:func:`scan` reports where the structure near the top of the document is (see
``_jsonframe.c``): the top-level object's braces, keys, colons and commas, the brackets
of its depth-1 containers, and the commas between their elements. The Kineto reader
uses it to cut the ``traceEvents`` array into slices of whole events as the file is
read, so that the whole document never has to be in memory.

The C scanner (``_jsonframe.c``) is built with the package (``setup.py``) as the extension
module ``charllm_trace.converters._jsonframe`` and called with ctypes (see
:mod:`charllm_trace._native_libs`). When it is missing or broken there is one warning per
process and a numpy scanner gives the same events (slower); ``CHARLLM_TRACE_NATIVE=0`` selects
the numpy scanner without a warning.
"""

from __future__ import annotations

import ctypes

import numpy as np

from charllm_trace import _native_libs

MODULE = "charllm_trace.converters._jsonframe"
_p = ctypes.c_void_p
_i64 = ctypes.c_int64

#: events the numpy scanner handles at once (bounds its temporary arrays)
NP_BLOCK = 1 << 20


class State:
    """The scanner's state between chunks: depth, inside a string, after a backslash in one."""

    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a = np.zeros(3, dtype=np.int64)

    @property
    def depth(self) -> int:
        return int(self.a[0])

    @property
    def in_string(self) -> bool:
        return bool(self.a[1])


def _declare(so: ctypes.CDLL) -> None:
    so.jf_scan.restype = _i64
    so.jf_scan.argtypes = [_p, _i64, _p, _i64, _p, _p, _p, _i64, _p]
    # the event decoder (converters/kineto_native.py)
    so.jd_new.restype = _p
    so.jd_new.argtypes = []
    so.jd_free.restype = None
    so.jd_free.argtypes = [_p]
    so.jd_decode.restype = _i64
    so.jd_decode.argtypes = [_p, _p, _i64, _i64] + [_p] * 11 + [_i64, _p]


_LIBRARY = _native_libs.Library(MODULE, _declare)
#: the loaded C scanner, or None when it is not usable here (or is disabled)
lib = _LIBRARY.lib
#: forget the loaded library (tests switch between the C and numpy scanners)
reset = _LIBRARY.reset


def scan(chunk: np.ndarray, state: State, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Events of ``chunk`` (uint8, the bytes from absolute offset ``base``): positions (int64,
    absolute), bytes (uint8) and depths before them (int8, clamped to -1..3). Updates ``state``."""
    so = lib()
    if so is not None:
        return _scan_c(so, chunk, state, base)
    parts = [_scan_np(chunk[i : i + NP_BLOCK], state, base + i) for i in range(0, len(chunk), NP_BLOCK)]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int8)
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([p[j] for p in parts]) for j in range(3))  # type: ignore[return-value]


def _scan_c(so: ctypes.CDLL, chunk: np.ndarray, state: State, base: int) -> tuple[np.ndarray, ...]:
    n = len(chunk)
    cap = max(64, n // 16)
    pos_parts, code_parts, dep_parts = [], [], []
    done = 0
    consumed = np.zeros(1, dtype=np.int64)
    chunk = np.ascontiguousarray(chunk)
    while True:
        pos = np.empty(cap, np.int64)
        code = np.empty(cap, np.uint8)
        dep = np.empty(cap, np.int8)
        k = so.jf_scan(
            chunk.ctypes.data + done,
            n - done,
            state.a.ctypes.data,
            base + done,
            pos.ctypes.data,
            code.ctypes.data,
            dep.ctypes.data,
            cap,
            consumed.ctypes.data,
        )
        pos_parts.append(pos[:k])
        code_parts.append(code[:k])
        dep_parts.append(dep[:k])
        done += int(consumed[0])
        if done >= n:
            break
        cap *= 2
    if len(pos_parts) == 1:
        return pos_parts[0], code_parts[0], dep_parts[0]
    return np.concatenate(pos_parts), np.concatenate(code_parts), np.concatenate(dep_parts)


#: byte classes for the numpy scanner: 1 quote, 2 backslash, 3 open, 4 close, 5 comma, 6 colon
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[ord('"')] = 1
_CLASS[ord("\\")] = 2
_CLASS[[ord("{"), ord("[")]] = 3
_CLASS[[ord("}"), ord("]")]] = 4
_CLASS[ord(",")] = 5
_CLASS[ord(":")] = 6


def _scan_np(b: np.ndarray, state: State, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numpy scanner: the same events as ``jf_scan`` (for valid JSON). Works on the few
    bytes that matter (quotes, backslashes, brackets, commas, colons) only."""
    n = len(b)
    depth0, in0, esc0 = (int(x) for x in state.a)
    cls = _CLASS[b]
    idx = np.flatnonzero(cls)
    k = cls[idx]
    if n == 0 or idx.size == 0:
        if n and in0 and esc0:
            state.a[2] = 0  # the carried backslash escaped this chunk's first byte
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int8)
    # backslash runs: a quote is escaped when an odd number of backslashes precede it
    isbs = k == 2
    bsl = idx[isbs]
    run_len = np.zeros(idx.size, dtype=np.int64)  # backslashes right before each element
    if bsl.size:
        new = np.ones(bsl.size, dtype=bool)
        new[1:] = np.diff(bsl) != 1
        first = np.maximum.accumulate(np.where(new, np.arange(bsl.size), 0))
        ending = np.arange(bsl.size) - first + 1  # run length ending at each backslash
        ending += (bsl[first] == 0) & (esc0 == 1)
        j = np.searchsorted(bsl, idx - 1)  # the backslash at idx - 1, if any
        jc = np.minimum(j, bsl.size - 1)
        hit = (j < bsl.size) & (bsl[jc] == idx - 1)
        run_len = np.where(hit, ending[jc], 0)
    run_len += (idx == 0) & (esc0 == 1)
    quote = (k == 1) & ((run_len & 1) == 0)
    qc = np.cumsum(quote, dtype=np.int64)
    in_before = ((in0 + qc - quote) & 1).astype(bool)
    outside = ~in_before & (k >= 3)
    delta = np.where(outside & (k == 3), 1, 0) - np.where(outside & (k == 4), 1, 0)
    d_after = depth0 + np.cumsum(delta)
    d_before = d_after - delta
    emit = (
        (quote & (d_before == 1))
        | ((delta == 1) & (d_before <= 1))
        | ((delta == -1) & (d_before <= 2))
        | (outside & (k == 5) & (d_before <= 2))
        | (outside & (k == 6) & (d_before == 1))
    )
    in_end = (in0 + int(qc[-1])) & 1
    esc_end = 0
    if in_end and b[-1] == 92:
        esc_end = int(ending[-1] & 1)  # the run of backslashes the chunk ends with
    state.a[0] = int(d_after[-1])
    state.a[1] = in_end
    state.a[2] = esc_end
    where = idx[emit]
    return where + base, b[where].copy(), np.clip(d_before[emit], -1, 3).astype(np.int8)
