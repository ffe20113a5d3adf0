"""Typed result of the CUDA/HIP graph launches (``analysis/graph_launches.py``; issue 24 item 2;
docs/analyses.md, "Graph launches"). Present in ``analyze`` only for traces with graph launches:
its frames are not in every document."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import Result
from charllm_trace.analysis.schemas import GRAPH_KERNEL_SCHEMA, GRAPH_LAUNCH_SCHEMA  # noqa: F401 - re-exported


@dataclass
class GraphLaunchResult(Result):
    """Every graph launch of the run and the kernels each started (docs/analyses.md)."""

    launches: pl.DataFrame  # GRAPH_LAUNCH_SCHEMA
    kernels: pl.DataFrame  # GRAPH_KERNEL_SCHEMA
