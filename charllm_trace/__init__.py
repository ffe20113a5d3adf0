"""charllm-trace: power, performance and thermal analysis of distributed training traces.

The public API is small::

    import charllm_trace as ct
    run = ct.load("run-dir/")          # a Run: one Trace (polars tables) per rank
    trace = run.traces[0]
    trace.nodes, trace.deps, trace.telemetry, trace.meta
"""

from charllm_trace._alloc import tune_polars_allocator

tune_polars_allocator()  # before anything imports polars: see charllm_trace/_alloc.py

from charllm_trace.errors import InputError  # noqa: E402
from charllm_trace.loader import load  # noqa: E402
from charllm_trace.model import ProcessGroup, Run, Trace, TraceMeta  # noqa: E402

__version__ = "0.1.0"

__all__ = ["InputError", "ProcessGroup", "Run", "Trace", "TraceMeta", "load", "__version__"]
