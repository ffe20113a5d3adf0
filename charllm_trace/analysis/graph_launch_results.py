"""Typed result of the CUDA/HIP graph launches (``analysis/graph_launches.py``; issue 24 item 2;
docs/analyses.md, "Graph launches"). Present in ``analyze`` only for traces with graph launches:
its frames are not in every document."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Columns, frame_columns
from charllm_trace.analysis.registry import Framed

GRAPH_LAUNCH_SCHEMA: Columns = frame_columns("graph_launches")
GRAPH_KERNEL_SCHEMA: Columns = frame_columns("graph_launch_kernels")


@dataclass
class GraphLaunchResult(Framed):
    """Every graph launch of the run and the kernels each started (docs/analyses.md)."""

    launches: pl.DataFrame  # GRAPH_LAUNCH_SCHEMA
    kernels: pl.DataFrame  # GRAPH_KERNEL_SCHEMA
    notes: list[str] = field(default_factory=list)
