"""Optional C helpers: compiled on first use with the system compiler, loaded with ctypes.

Each helper (the ET scanner ``et/_etscan.c``, the JSON framer ``converters/_jsonframe.c``)
is built with ``$CC`` (else ``cc``, ``gcc`` or ``clang``) into the charllm-trace cache
directory, named by a hash of its source, the platform and the Python version, so it is
built once per machine and version. When no compiler is available, the build fails, or
``CHARLLM_TRACE_NATIVE=0``, :func:`load` returns None and the caller uses its numpy code
instead (same results, slower).
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

# libraries built in this process, by file name: found again when the cache root changes
_BUILT: dict[str, Path] = {}


def disabled() -> bool:
    """True when ``CHARLLM_TRACE_NATIVE=0`` asks for the numpy code paths."""
    return os.environ.get("CHARLLM_TRACE_NATIVE", "1") == "0"


def _compile(src: Path, target: Path) -> bool:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        r = subprocess.run(
            [cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(src)],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if r.returncode != 0:
            return False
        os.replace(tmp, target)  # atomic: concurrent builders never load a half-written file
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(src: Path, stem: str) -> ctypes.CDLL | None:
    """The shared library built from ``src`` (compiled now if needed), or None."""
    if disabled() or not src.exists():
        return None
    from charllm_trace.et.cache import cache_root

    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    tag = f"{platform.system()}-{platform.machine()}-{sys.implementation.cache_tag}"
    target = cache_root() / "native" / f"{stem}-{digest}-{tag}.so"
    if not target.exists() and target.name in _BUILT and _BUILT[target.name].exists():
        target = _BUILT[target.name]
    try:
        if not target.exists() and not _compile(src, target):
            return None
        _BUILT[target.name] = target
        return ctypes.CDLL(str(target))
    except OSError:
        return None
