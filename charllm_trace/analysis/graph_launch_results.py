"""Typed result of the CUDA/HIP graph launches (``analysis/graph_launches.py``; issue 24 item 2;
docs/analyses.md, "Graph launches"). Present in ``analyze`` only for traces with graph launches:
its frames are not in every document."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: One row per graph launch call (``cudaGraphLaunch``, ``hipGraphLaunch`` ...) with its kernels.
GRAPH_LAUNCH_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64, "", "the step window holding its first kernel's start (null: none)"),
    Col("correlation", pl.Int64, "", "the id the call shares with the GPU activity it started"),
    Col("call_name", pl.String),
    Col("call_start_ns", pl.Int64, "ns"),
    Col("call_dur_ns", pl.Int64, "ns", "the launch call's own duration on the CPU"),
    Col("n_kernels", pl.Int64, "", "GPU activity (kernels, copies, sets) it started"),
    Col("first_start_ns", pl.Int64, "ns", "the first of them began"),
    Col("last_end_ns", pl.Int64, "ns", "the last of them ended"),
    Col("launch_to_first_ns", pl.Int64, "ns", "first_start - call_start"),
    Col("span_ns", pl.Int64, "ns", "last_end - first_start"),
    Col("busy_ns", pl.Int64, "ns", "|union of its kernels' intervals|"),
    Col("idle_ns", pl.Int64, "ns", "span - busy: the GPU idle between its kernels (its streams together)"),
    Col("kernel_ns", pl.Int64, "ns", "the kernels' summed durations"),
)

#: One row per GPU operator started by a graph launch, in start order within its launch.
GRAPH_KERNEL_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("correlation", pl.Int64, "", "its graph launch"),
    Col("index", pl.Int64, "", "0 for the first to start"),
    Col("name", pl.String),
    Col("stream", pl.Int64),
    Col("start_ns", pl.Int64, "ns"),
    Col("dur_ns", pl.Int64, "ns"),
    Col("since_call_ns", pl.Int64, "ns", "start - the launch call's start"),
    Col("gap_ns", pl.Int64, "ns", "start - the latest end of the launch's earlier kernels (null: the first)"),
)


@dataclass
class GraphLaunchResult:
    """Every graph launch of the run and the kernels each started (docs/analyses.md)."""

    launches: pl.DataFrame  # GRAPH_LAUNCH_SCHEMA
    kernels: pl.DataFrame  # GRAPH_KERNEL_SCHEMA
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"graph_launches": self.launches, "graph_launch_kernels": self.kernels}
