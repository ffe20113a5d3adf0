"""The C scanner (``_etscan.c``) and node encoder (``_etwrite.c``), built with the package (``setup.py``) and called with ctypes.

:func:`lib` opens the extension module ``charllm_trace.et._etscan`` through
:mod:`charllm_trace.core.native_libs`. The scanner is required: when it is missing or broken,
:func:`lib` raises :class:`ScannerMissing` (one line naming the module, why, and the fix); there
is no slow path. ``CHARLLM_TRACE_NATIVE=0`` makes it return None: the tests' switch to the numpy
oracle (``et/oracle.py``) that they compare the scanner with.
"""

from __future__ import annotations

import ctypes

from charllm_trace.core import native_libs as _native_libs

MODULE = "charllm_trace.et._etscan"

_p = ctypes.c_void_p
_i64 = ctypes.c_int64


def _declare(so: ctypes.CDLL) -> None:
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
    so.et_encode_nodes.restype = _i64
    so.et_encode_nodes.argtypes = [_p, _i64, _p, _i64, ctypes.POINTER(_i64)]


#: the fields of ``_etwrite.c``'s ``et_rows``, in order: ``et_encode_nodes`` takes them as 64-bit
#: words (integers, and the addresses of arrays)
ET_ROWS = (
    "n", "ints", "int_null", "n_int_attrs", "small", "str_off", "str_data", "str_null", "n_str_attrs",
    "ctrl_off", "ctrl", "data_off", "data", "extra_code", "extra_off", "extra_data", "piece_off",
    "piece_data", "rank", "has_rank",
)  # fmt: skip


_LIBRARY = _native_libs.Library(MODULE, _declare)

#: the scanner is missing, broken or out of date (kept by this name for callers and tests)
ScannerMissing = _native_libs.NativeModuleMissing


def lib() -> ctypes.CDLL | None:
    """The loaded scanner; None only with ``CHARLLM_TRACE_NATIVE=0`` (the tests' numpy oracle).

    Raises :class:`ScannerMissing` when the module is missing or broken."""
    return _LIBRARY.lib()


def reset() -> None:
    """Forget the loaded library (tests switch between the C and numpy paths)."""
    _LIBRARY.reset()
