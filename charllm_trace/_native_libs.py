"""The compiled C helpers that are called through ctypes, found where the package was installed.

The ET scanner (``charllm_trace.et._etscan``, from ``et/_etscan.c``) and the JSON framer
(``charllm_trace.converters._jsonframe``, from ``converters/_jsonframe.c``) are built by
setuptools when the package is built or installed (``setup.py``), as extension modules: the
import system names and places them (``_etscan.cpython-311-x86_64-linux-gnu.so`` beside
``et/_native.py``). Their functions are plain C and are called with ctypes (which releases the
GIL during each call); the module's ``PyInit`` function is only a stub. See docs/native.md.

Nothing is compiled at run time and nothing is loaded from a cache directory: :func:`load`
opens only the file the import system finds for the module (an extension module inside the
package). When that is missing or cannot be loaded, it warns once per process, naming the
module and the fix, and returns None; the caller then uses its numpy code (same results,
~15x slower). ``CHARLLM_TRACE_NATIVE=0`` selects the numpy code on purpose, without a warning
(the tests use it as the oracle).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import warnings
from collections.abc import Callable


class NativeModuleWarning(RuntimeWarning):
    """A compiled helper is missing or broken: the slower numpy code is used instead."""


# modules already warned about in this process (a test's reset() must not warn again)
_WARNED: set[str] = set()


def disabled() -> bool:
    """True when ``CHARLLM_TRACE_NATIVE=0`` asks for the numpy code paths."""
    return os.environ.get("CHARLLM_TRACE_NATIVE", "1") == "0"


def module_path(module: str) -> str | None:
    """The file of the compiled extension module ``module`` as the import system finds it, or
    None when there is none (not built, or something other than an extension module)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return None
    return spec.origin


def warn_unusable(module: str, why: str) -> None:
    """Warn, once per process and module, that ``module`` cannot be used and why."""
    if module in _WARNED:
        return
    _WARNED.add(module)
    warnings.warn(
        f"charllm-trace: the compiled module {module} {why}; using the numpy fallback, which is "
        "about 15x slower. Fix: reinstall charllm-trace where a C compiler is available "
        "(in a checkout: pip install -e .). CHARLLM_TRACE_NATIVE=0 selects the numpy code "
        "without this warning.",
        NativeModuleWarning,
        stacklevel=3,
    )


def load(module: str) -> ctypes.CDLL | None:
    """The compiled helper ``module`` (e.g. ``"charllm_trace.et._etscan"``) opened with ctypes, or
    None (after one warning) when it is missing or cannot be loaded, or (silently) when
    ``CHARLLM_TRACE_NATIVE=0``."""
    if disabled():
        return None
    path = module_path(module)
    if path is None:
        warn_unusable(module, "is not built")
        return None
    try:
        return ctypes.CDLL(path)
    except OSError as exc:
        warn_unusable(module, f"cannot be loaded ({exc})")
        return None


class Library:
    """One compiled helper, opened once per process: ``lib()`` loads ``module`` and declares its
    functions with ``declare(so)`` the first time (None when it is missing, disabled, or built
    from other sources: a function ``declare`` names is absent); ``reset()`` forgets it (tests
    switch between the C and numpy paths)."""

    def __init__(self, module: str, declare: Callable[[ctypes.CDLL], None]) -> None:
        self.module = module
        self._declare = declare
        self._lib: ctypes.CDLL | None = None
        self._tried = False

    def lib(self) -> ctypes.CDLL | None:
        if self._tried:
            return self._lib
        self._tried = True
        so = load(self.module)
        if so is None:
            return None
        try:
            self._declare(so)
        except AttributeError as exc:  # a build from other sources (an old checkout's)
            warn_unusable(self.module, f"is out of date ({exc})")
            return None
        self._lib = so
        return so

    def reset(self) -> None:
        self._lib = None
        self._tried = False
