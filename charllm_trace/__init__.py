"""charllm-trace: power, performance and thermal analysis of distributed training traces.

The public API is small::

    import charllm_trace as ct
    run = ct.load("run-dir/")          # a Run: one Trace (polars tables) per rank
    trace = run.traces[0]
    trace.nodes, trace.deps, trace.telemetry, trace.meta
"""

from charllm_trace.errors import InputError
from charllm_trace.loader import load
from charllm_trace.model import ProcessGroup, Run, Trace, TraceMeta

__version__ = "0.1.0"

__all__ = ["InputError", "ProcessGroup", "Run", "Trace", "TraceMeta", "load", "__version__"]
