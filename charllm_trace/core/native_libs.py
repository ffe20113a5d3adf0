"""The compiled C helpers that are called through ctypes, found where the package was installed.

The ET scanner (``charllm_trace.et._etscan``, from ``et/_etscan.c``) and the JSON framer and
event decoder (``charllm_trace.converters._jsonframe``, from ``converters/_jsonframe.c`` and
``_jsondecode.c``) are built by setuptools when the package is built or installed (``setup.py``),
as extension modules: the import system names and places them (``_etscan.cpython-311-x86_64-linux-gnu.so`` beside
``et/_native.py``). Their functions are plain C and are called with ctypes (which releases the
GIL during each call); the module's ``PyInit`` function is only a stub. See docs/native.md.

Nothing is compiled at run time and nothing is loaded from a cache directory: :func:`load`
opens only the file the import system finds for the module (an extension module inside the
package). Both helpers are required: when one is missing, cannot be loaded or is out of date,
:meth:`Library.lib` raises :class:`NativeModuleMissing` (one line naming the module, why, and the
fix), every time it is asked; there is no slow path. ``CHARLLM_TRACE_NATIVE=0`` makes it return
None instead: the tests' switch to the numpy oracles they compare the C code with
(``et/oracle.py``, ``converters/jsonframe_oracle.py``).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
from collections.abc import Callable


class NativeModuleMissing(RuntimeError):
    """A compiled helper is not built, cannot be loaded or is out of date (a broken install)."""


def disabled() -> bool:
    """True when ``CHARLLM_TRACE_NATIVE=0`` asks for the numpy oracles (tests)."""
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


def missing(module: str, why: str) -> NativeModuleMissing:
    """The error for ``module`` that cannot be used (``why``: "is not built", ...)."""
    return NativeModuleMissing(
        f"the compiled module {module} {why}: charllm-trace cannot read traces without it; "
        "reinstall charllm-trace where a C compiler is available (in a checkout: pip install -e .)"
    )


def load(module: str) -> ctypes.CDLL:
    """The compiled helper ``module`` (e.g. ``"charllm_trace.et._etscan"``) opened with ctypes.

    Raises :class:`NativeModuleMissing` when it is missing or cannot be loaded."""
    path = module_path(module)
    if path is None:
        raise missing(module, "is not built")
    try:
        return ctypes.CDLL(path)
    except OSError as exc:
        raise missing(module, f"cannot be loaded ({' '.join(str(exc).split())})") from None


class Library:
    """One compiled helper, opened once per process: ``lib()`` loads ``module`` and declares its
    functions with ``declare(so)`` the first time; it returns None only when disabled
    (``CHARLLM_TRACE_NATIVE=0``) and raises :class:`NativeModuleMissing`, the same each time, when
    the module is missing, broken, or built from other sources (a function ``declare`` names is
    absent); ``reset()`` forgets it (tests switch between the C code and the oracles)."""

    def __init__(self, module: str, declare: Callable[[ctypes.CDLL], None]) -> None:
        self.module = module
        self._declare = declare
        self._lib: ctypes.CDLL | None = None
        self._error: NativeModuleMissing | None = None

    def lib(self) -> ctypes.CDLL | None:
        if disabled():
            return None
        if self._lib is not None:
            return self._lib
        if self._error is None:
            try:
                so = load(self.module)
                self._declare(so)
            except NativeModuleMissing as exc:
                self._error = exc
            except AttributeError as exc:  # a build from other sources (an old checkout's)
                self._error = missing(self.module, f"is out of date ({exc})")
            else:
                self._lib = so
                return so
        raise type(self._error)(*self._error.args)  # a fresh one: no traceback of the first try

    def reset(self) -> None:
        self._lib = None
        self._error = None
