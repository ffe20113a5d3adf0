"""Typed result of the CUDA/HIP graph launches (``analysis/graph_launches.py``; issue 24 item 2;
docs/analyses.md, "Graph launches"). Present in ``analyze`` only for traces with graph launches:
its frames are not in every document."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: One row per graph launch call (``cudaGraphLaunch``, ``hipGraphLaunch`` ...) with its kernels.
GRAPH_LAUNCH_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "step": pl.Int64,  # the step window holding its first kernel's start (null: none)
    "correlation": pl.Int64,  # the id the call shares with the GPU activity it started
    "call_name": pl.String,
    "call_start_ns": pl.Int64,
    "call_dur_ns": pl.Int64,  # the launch call's own duration on the CPU
    "n_kernels": pl.Int64,  # GPU activity (kernels, copies, sets) it started
    "first_start_ns": pl.Int64,  # the first of them began
    "last_end_ns": pl.Int64,  # the last of them ended
    "launch_to_first_ns": pl.Int64,  # first_start - call_start
    "span_ns": pl.Int64,  # last_end - first_start
    "busy_ns": pl.Int64,  # |union of its kernels' intervals|
    "idle_ns": pl.Int64,  # span - busy: the GPU idle between its kernels (its streams together)
    "kernel_ns": pl.Int64,  # the kernels' summed durations
}

#: One row per GPU operator started by a graph launch, in start order within its launch.
GRAPH_KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "correlation": pl.Int64,  # its graph launch
    "index": pl.Int64,  # 0 for the first to start
    "name": pl.String,
    "stream": pl.Int64,
    "start_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "since_call_ns": pl.Int64,  # start - the launch call's start
    "gap_ns": pl.Int64,  # start - the latest end of the launch's earlier kernels (null: the first)
}


@dataclass
class GraphLaunchResult:
    """Every graph launch of the run and the kernels each started (docs/analyses.md)."""

    launches: pl.DataFrame  # GRAPH_LAUNCH_SCHEMA
    kernels: pl.DataFrame  # GRAPH_KERNEL_SCHEMA
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"graph_launches": self.launches, "graph_launch_kernels": self.kernels}


#: frame name -> (RunAnalysis field, columns): only in documents of traces with graph launches.
GRAPH_LAUNCH_FRAMES: dict[str, tuple[str, dict[str, pl.DataType]]] = {
    "graph_launches": ("graph_launches", GRAPH_LAUNCH_SCHEMA),
    "graph_launch_kernels": ("graph_launches", GRAPH_KERNEL_SCHEMA),
}
