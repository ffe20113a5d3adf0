"""Streaming framing of a JSON document's top level, chunk by chunk.

:func:`scan` reports where the structure near the top of the document is (see
``_jsonframe.c``): the top-level object's braces, keys, colons and commas, the brackets
of its depth-1 containers, and the commas between their elements. The Kineto reader
uses it to cut the ``traceEvents`` array into slices of whole events as the file is
read, so that the whole document never has to be in memory.

The C scanner (``_jsonframe.c``) is built with the package (``setup.py``) as the extension
module ``charllm_trace.converters._jsonframe`` and called with ctypes (see
:mod:`charllm_trace.core.native_libs`). It is required: when it is missing or broken, reading a
Kineto profile stops with one error naming the module and the fix (``NativeModuleMissing``).
``CHARLLM_TRACE_NATIVE=0`` selects the numpy scanner of ``jsonframe_oracle.py`` instead, the
tests' oracle.
"""

from __future__ import annotations

import ctypes

import numpy as np

from charllm_trace.core import native_libs as _native_libs

MODULE = "charllm_trace.converters._jsonframe"
_p = ctypes.c_void_p
_i64 = ctypes.c_int64


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
    so.jd_info_len.restype = _i64
    so.jd_info_len.argtypes = []
    so.jd_decode.restype = _i64
    so.jd_decode.argtypes = [_p, _p, _i64, _i64] + [_p] * 11 + [_i64, _p, _p, _p]


_LIBRARY = _native_libs.Library(MODULE, _declare)
#: the loaded C scanner; None only when disabled (``CHARLLM_TRACE_NATIVE=0``: the tests' oracle);
#: raises ``NativeModuleMissing`` when it is missing or broken
lib = _LIBRARY.lib
#: forget the loaded library (tests switch between the C and numpy scanners)
reset = _LIBRARY.reset


def scan(chunk: np.ndarray, state: State, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Events of ``chunk`` (uint8, the bytes from absolute offset ``base``): positions (int64,
    absolute), bytes (uint8) and depths before them (int8, clamped to -1..3). Updates ``state``."""
    so = lib()
    if so is not None:
        return _scan_c(so, chunk, state, base)
    from charllm_trace.converters import jsonframe_oracle  # CHARLLM_TRACE_NATIVE=0: the tests

    return jsonframe_oracle.scan(chunk, state, base)


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
