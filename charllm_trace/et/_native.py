"""The C scanner (``_etscan.c``), built with the package (``setup.py``) and called with ctypes.

:func:`lib` opens the extension module ``charllm_trace.et._etscan`` through
:mod:`charllm_trace._native_libs`. The scanner is required: when it is missing or broken,
:func:`lib` raises :class:`ScannerMissing` (one line naming the module, why, and the fix); there
is no slow path. ``CHARLLM_TRACE_NATIVE=0`` makes it return None: the tests' switch to the numpy
oracle (``et/oracle.py``) that they compare the scanner with.
"""

from __future__ import annotations

import ctypes
import warnings

from charllm_trace import _native_libs

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


_LIBRARY = _native_libs.Library(MODULE, _declare)
# the loaded scanner, or why it could not be used, once known
_LOADED: list[ctypes.CDLL] = []
_WHY: list[str] = []


class ScannerMissing(RuntimeError):
    """The compiled ET scanner is not built, cannot be loaded or is out of date."""


def lib() -> ctypes.CDLL | None:
    """The loaded scanner; None only with ``CHARLLM_TRACE_NATIVE=0`` (the tests' numpy oracle).

    Raises :class:`ScannerMissing` when the module is missing or broken."""
    if _native_libs.disabled():
        return None
    if _LOADED:
        return _LOADED[0]
    if not _WHY:
        # the loader's one warning becomes this error's reason (nothing else is printed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", _native_libs.NativeModuleWarning)
            so = _LIBRARY.lib()
        if so is not None:
            _LOADED.append(so)
            return so
        why = [
            str(w.message).split(MODULE, 1)[1].split(";", 1)[0].strip()
            for w in caught
            if MODULE in str(w.message)
        ]
        _WHY.append(why[0] if why else "is not built")
    raise ScannerMissing(
        f"the compiled module {MODULE} {_WHY[0]}: charllm-trace cannot read Chakra ETs without it; "
        "reinstall charllm-trace where a C compiler is available (in a checkout: pip install -e .)"
    )


def reset() -> None:
    """Forget the loaded library (tests switch between the C and numpy paths)."""
    _LOADED.clear()
    _WHY.clear()
    _LIBRARY.reset()
