"""How polars' memory allocator gives memory back: an opt-in, process-wide setting.

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
(``charllm_trace.cli.main``); a program that uses the library may call
``charllm_trace.tune_polars_allocator()`` before it, or anything else, imports polars.

jemalloc reads its settings from ``_RJEM_MALLOC_CONF`` as polars loads (polars appends the
value it finds to its own), so this works only before polars is imported. The variable is set
for that import only: afterwards it holds what polars sets by itself, so child processes (the
training command under ``collect``) and other programs are not affected. A user's own
``_RJEM_MALLOC_CONF`` always wins, and ``CHARLLM_TRACE_ALLOC=default`` leaves polars' settings
alone.
"""

from __future__ import annotations

import os
import sys

#: jemalloc settings charllm-trace loads polars with
POLARS_MALLOC_CONF = "background_thread:true,dirty_decay_ms:100,muzzy_decay_ms:0"
_VAR = "_RJEM_MALLOC_CONF"


def tune_polars_allocator() -> bool:
    """Import polars with :data:`POLARS_MALLOC_CONF`. Returns whether the setting was applied
    (False when polars was already imported, the user set the variable, or opted out)."""
    if "polars" in sys.modules or _VAR in os.environ:
        return False
    if os.environ.get("CHARLLM_TRACE_ALLOC", "") == "default":
        return False
    os.environ[_VAR] = POLARS_MALLOC_CONF
    try:
        import polars  # noqa: F401 - jemalloc reads the variable as polars loads
    finally:
        value = os.environ.get(_VAR, "")
        if value == POLARS_MALLOC_CONF:
            del os.environ[_VAR]
        elif value.endswith("," + POLARS_MALLOC_CONF):  # polars' own settings, then ours
            os.environ[_VAR] = value[: -len(POLARS_MALLOC_CONF) - 1]
    return True
