"""The optional C scanner (``_etscan.c``), built on first use by :mod:`charllm_trace._cbuild`.

If it cannot be built here, or ``CHARLLM_TRACE_NATIVE=0``, :func:`lib` returns None and the
numpy decoder is used instead (same results, slower).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from charllm_trace._cbuild import load

_SRC = Path(__file__).with_name("_etscan.c")
_LIB: ctypes.CDLL | None = None
_TRIED = False

_p = ctypes.c_void_p
_i64 = ctypes.c_int64


def lib() -> ctypes.CDLL | None:
    """The loaded scanner, or None when it cannot be built here (or is disabled)."""
    global _LIB, _TRIED
    if _TRIED:
        return _LIB
    _TRIED = True
    so = load(_SRC, "etscan")
    if so is None:
        return None
    so.et_scan.restype = _i64
    so.et_scan.argtypes = [_p, _i64, _p, _p] + [_p] * 19 + [_i64, _i64, _i64, _p]
    so.et_json.restype = _i64
    so.et_json.argtypes = [_p, _i64] + [_p] * 15 + [_i64]
    so.et_group.restype = None
    so.et_group.argtypes = [_p, _i64, _p, _i64, _p, _p]
    so.et_resync.restype = _i64
    so.et_resync.argtypes = [_p, _i64, _i64, _i64, _i64, _i64]
    so.et_walk.restype = _i64
    so.et_walk.argtypes = [_p, _i64, _i64, _i64, _p]
    so.et_utf8.restype = _i64
    so.et_utf8.argtypes = [_p, _p, _p, _i64]
    so.et_views.restype = None
    so.et_views.argtypes = [_p, _p, _p, _i64, _p, _i64]
    _LIB = so
    return so


def reset() -> None:
    """Forget the loaded library (tests switch between the C and numpy paths)."""
    global _LIB, _TRIED
    _LIB = None
    _TRIED = False
