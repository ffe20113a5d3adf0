"""charllm-trace: power, performance and thermal analysis of distributed training traces.

The public API is small::

    import charllm_trace as ct
    run = ct.load("run-dir/")          # a Run: one Trace (polars tables) per rank
    trace = run.traces[0]
    trace.nodes, trace.deps, trace.telemetry, trace.meta
    result = ct.analyze("run-dir/").analysis   # any input, through the results cache

``analyze`` is the service every command uses (``charllm_trace/service.py``): any input (a file,
a directory, a run, an fsspec URL, saved results), one cache, here or on a Dask cluster
(``scheduler=``), typed results.

Importing the package has no side effects: it does not change the environment or any
process-wide setting, and it does not even load polars until a name below is first used.
Process-wide tuning is the program's choice: the ``charllm-trace`` command asks for it,
library users may call :func:`charllm_trace.tune_polars_allocator` before polars is imported
and :func:`charllm_trace.trim_heap_after_reads` (see ``charllm_trace/core/alloc.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from charllm_trace.core.errors import InputError

if TYPE_CHECKING:
    from charllm_trace.core.alloc import trim_heap_after_reads, tune_polars_allocator
    from charllm_trace.core.model import ProcessGroup, Run, Trace, TraceMeta
    from charllm_trace.inputs.loader import load
    from charllm_trace.service import Analysis, Request, analyze

__version__ = "0.1.0"

__all__ = [
    "Analysis",
    "InputError",
    "ProcessGroup",
    "Run",
    "Trace",
    "Request",
    "TraceMeta",
    "analyze",
    "load",
    "trim_heap_after_reads",
    "tune_polars_allocator",
    "__version__",
]

# name -> module it comes from, imported on first use (PEP 562)
_LAZY = {
    "analyze": "charllm_trace.service",
    "Analysis": "charllm_trace.service",
    "Request": "charllm_trace.service",
    "load": "charllm_trace.inputs.loader",
    "ProcessGroup": "charllm_trace.core.model",
    "Run": "charllm_trace.core.model",
    "Trace": "charllm_trace.core.model",
    "TraceMeta": "charllm_trace.core.model",
    "trim_heap_after_reads": "charllm_trace.core.alloc",
    "tune_polars_allocator": "charllm_trace.core.alloc",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'charllm_trace' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
