"""The results ``analyze`` computes only where the run has their data (CPU scheduler telemetry,
graph launches): their types and frames, for the results file and the JSON contract. Without the
data the result is None, nothing is said in ``skipped`` and its frames are not in the document."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.cpu_wait_results import CPU_WAIT_FRAMES, CpuWaitResult
from charllm_trace.analysis.graph_launch_results import GRAPH_LAUNCH_FRAMES, GraphLaunchResult

#: RunAnalysis field -> its result type
OPTIONAL_RESULT_TYPES: dict[str, type] = {"cpu_wait": CpuWaitResult, "graph_launches": GraphLaunchResult}
#: frame name -> (RunAnalysis field, columns)
OPTIONAL_FRAMES: dict[str, tuple[str, dict[str, pl.DataType]]] = {**CPU_WAIT_FRAMES, **GRAPH_LAUNCH_FRAMES}
