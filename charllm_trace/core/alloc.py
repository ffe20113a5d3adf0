"""How memory is given back: two opt-in, process-wide settings (polars' allocator; the C heap).

Polars allocates with jemalloc and configures it, when it is imported, to keep freed pages
for 0.5 s ("dirty") and then 1 s more as pages the kernel may take back but still counts as
resident ("muzzy", ``MADV_FREE``); that purging also only happens when the allocator is
busy. Loading and analysing a big trace frees hundreds of MiB of intermediate columns within
a second or two, so the run's peak resident memory is then mostly pages it no longer uses.
:func:`tune_polars_allocator` asks jemalloc to return freed pages after 100 ms, at once for
good (``muzzy_decay_ms:0``), with its background thread doing the purging. Measured on a
1 M-event Kineto trace (``benchmarks/bench_analyze.py --tools ours,ours-untuned``): peak RSS
380-400 MiB instead of 456-459 MiB, run time unchanged within the noise.

This changes the whole process, so the library never does it by itself (``import charllm_trace``
has no side effects): the ``charllm-trace`` command calls it first thing
(``charllm_trace.cli.app.main``); a program that uses the library may call
``charllm_trace.tune_polars_allocator()`` before it, or anything else, imports polars.

jemalloc reads its settings from ``_RJEM_MALLOC_CONF`` as polars loads (polars appends the
value it finds to its own), so this works only before polars is imported. The variable is set
for that import only: afterwards it holds what polars sets by itself, so child processes (the
training command under ``collect``) and other programs are not affected. A user's own
``_RJEM_MALLOC_CONF`` always wins, and ``CHARLLM_TRACE_ALLOC=default`` leaves polars' settings
alone.

The C heap: decoding a million Kineto events makes and frees millions of small Python objects,
and glibc keeps the freed pages (255 MiB resident after reading the V100 x263 benchmark profile
instead of 168 MiB) unless ``malloc_trim`` is called. :func:`trim_heap` does that after a read or
a build, but only once :func:`trim_heap_after_reads` has turned it on for the process (the
command does, first thing; a library user may): trimming acts on the whole process's heap.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: jemalloc settings charllm-trace loads polars with
POLARS_MALLOC_CONF = "background_thread:true,dirty_decay_ms:100,muzzy_decay_ms:0"
#: added to them in a process that drives Dask workers (:func:`one_arena_for_driver`)
DRIVER_MALLOC_CONF = "narenas:1"
_VAR = "_RJEM_MALLOC_CONF"
_DRIVER = False


def one_arena_for_driver() -> bool:
    """Load polars, when this process loads it with :data:`POLARS_MALLOC_CONF` at all, with one
    jemalloc arena (:data:`DRIVER_MALLOC_CONF`) instead of jemalloc's four per CPU: for a
    process whose polars work is the merging of many small per-rank frames (``--scheduler``'s
    driver, ``engine/driver.py``), where freed pages stay behind in every arena a thread touched.
    Measured with ``benchmarks/bench_driver_stages.py`` (against ``--without-driver-arena``) on
    the generated DLRM runs (2 CPUs, 8 arenas by default): the driver's peak 206 MiB instead of
    212 at 4,096 ranks, 163 instead of 170 at 1,024, no difference beyond the noise at 128
    (142-149 against 142-150), the JSON byte-identical (docs/benchmarks.md, "seventh round").
    Not for one big trace analysed here: there polars' threads allocate in parallel, and one
    arena would make them take turns. Returns whether it applies (polars not yet imported, the
    setting not left to the user)."""
    global _DRIVER
    if not _may_tune():
        return False
    _DRIVER = True
    return True


def _conf() -> str:
    return POLARS_MALLOC_CONF + ("," + DRIVER_MALLOC_CONF if _DRIVER else "")


def _may_tune() -> bool:
    if "polars" in sys.modules or _VAR in os.environ:
        return False
    return os.environ.get("CHARLLM_TRACE_ALLOC", "") != "default"


def _with_setting(load: Any) -> Any:
    """``load()`` with :data:`POLARS_MALLOC_CONF` (and :data:`DRIVER_MALLOC_CONF` where asked)
    in the environment, which is then put back as polars left it (its own settings kept, ours
    removed)."""
    conf = _conf()
    os.environ[_VAR] = conf
    try:
        return load()
    finally:
        value = os.environ.get(_VAR, "")
        if value == conf:
            del os.environ[_VAR]
        elif value.endswith("," + conf):  # polars' own settings, then ours
            os.environ[_VAR] = value[: -len(conf) - 1]


def tune_polars_allocator() -> bool:
    """Import polars with :data:`POLARS_MALLOC_CONF`. Returns whether the setting was applied
    (False when polars was already imported, the user set the variable, or opted out)."""
    if not _may_tune():
        return False
    _with_setting(lambda: __import__("polars"))  # jemalloc reads the variable as polars loads
    return True


class _OnPolarsImport:
    """A ``sys.meta_path`` finder that steps in once, for ``polars``: the module is found as
    usual, and executed with :data:`POLARS_MALLOC_CONF` in the environment."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "polars":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not _may_tune():
            return spec
        run = spec.loader.exec_module
        spec.loader.exec_module = lambda module: _with_setting(lambda: run(module))  # type: ignore[method-assign]
        return spec


def tune_polars_allocator_on_import() -> bool:
    """:func:`tune_polars_allocator` when polars is first imported, not now: a command that ends
    without polars (a repeated analysis printed from the cache, ``store/output_cache.py``) does not pay
    its import (0.11 s). Returns whether it will be applied (the same conditions)."""
    if not _may_tune():
        return False
    if not any(isinstance(f, _OnPolarsImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnPolarsImport())
    return True


# --- the C heap ----------------------------------------------------------------

_TRIM_ON = False
_MALLOC_TRIM: Any = None


def trim_heap_after_reads(on: bool = True) -> None:
    """Let :func:`trim_heap` return the C heap's free pages after reads and builds (process-wide;
    off until asked: the ``charllm-trace`` command turns it on)."""
    global _TRIM_ON
    _TRIM_ON = bool(on)


def trim_heap_enabled() -> bool:
    return _TRIM_ON


def trim_heap() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; a few ms), when
    :func:`trim_heap_after_reads` turned it on; elsewhere (no glibc) nothing."""
    global _MALLOC_TRIM
    if not _TRIM_ON:
        return
    if _MALLOC_TRIM is None:
        _MALLOC_TRIM = False
        try:
            import ctypes

            # the C library already loaded into this process (find_library would run ldconfig or a
            # compiler at run time)
            fn = getattr(ctypes.CDLL(None), "malloc_trim", None)
            if fn is not None:
                fn.argtypes = [ctypes.c_size_t]
                fn.restype = ctypes.c_int
                _MALLOC_TRIM = fn
        except (OSError, AttributeError):
            pass
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a trace is decoded or converted, then back on
    as it was. Decoding a host ET or a Kineto profile with ``orjson`` makes hundreds of thousands
    of lists and dicts, none in a cycle; each 700 of them start a young-generation collection,
    and every tenth of those an older one that walks everything the process holds, so the cost
    grows with the rest of the heap (a test session, a notebook, a Dask worker holding other
    ranks): a 5 MB host ET took 0.10-0.59 s to decode with the collector on and 0.04-0.11 s
    with it off in the same process (docs/benchmarks.md, "The collector off while decoding").
    The state is process-wide: with several threads converting at once the first to finish
    turns it back on and the others merely lose the speed-up."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
