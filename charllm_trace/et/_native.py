"""The optional C scanner (``_etscan.c``): compiled on first use, loaded with ctypes.

The library is built with the system C compiler (``$CC``, else ``cc``) into the
charllm-trace cache directory, named by a hash of the source, so it is built
once per machine and version. If no compiler is available, or
``CHARLLM_TRACE_NATIVE=0``, :func:`lib` returns None and the numpy decoder is
used instead (same results, slower).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from charllm_trace.et.cache import cache_root

_SRC = Path(__file__).with_name("_etscan.c")
_LIB: ctypes.CDLL | None = None
_BUILT: dict[str, Path] = {}
_TRIED = False

_p = ctypes.c_void_p
_i64 = ctypes.c_int64


def _build(target: Path) -> bool:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        r = subprocess.run(
            [cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(_SRC)],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if r.returncode != 0:
            return False
        os.replace(tmp, target)
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def lib() -> ctypes.CDLL | None:
    """The loaded scanner, or None when it cannot be built here (or is disabled)."""
    global _LIB, _TRIED
    if _TRIED:
        return _LIB
    _TRIED = True
    if os.environ.get("CHARLLM_TRACE_NATIVE", "1") == "0" or not _SRC.exists():
        return None
    digest = hashlib.sha256(_SRC.read_bytes()).hexdigest()[:16]
    tag = f"{platform.system()}-{platform.machine()}-{sys.implementation.cache_tag}"
    target = cache_root() / "native" / f"etscan-{digest}-{tag}.so"
    if not target.exists() and _BUILT.get(target.name) and _BUILT[target.name].exists():
        target = _BUILT[target.name]  # built earlier in this process, under another cache root
    try:
        if not target.exists() and not _build(target):
            return None
        _BUILT[target.name] = target
        so = ctypes.CDLL(str(target))
    except OSError:
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
