"""Typed result of the pipeline view (``analysis/pipeline.py``): microbatch spans, bubbles per
stage and step, and the schedule's phases. Definitions in docs/analyses.md, "Pipeline bubbles"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: One row per labelled microbatch forward or backward on one rank.
PIPELINE_MB_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64, "", "the ProfilerStep#N the span starts in (null: outside every step)"),
    Col("pipeline", pl.String, "", 'the pipeline-parallel process group ("" without one)'),
    Col("stage", pl.Int64, "", "the rank's position in its pipeline group (0 = first stage)"),
    Col("kind", pl.String, "", '"forward" | "backward"'),
    Col("microbatch", pl.Int64),
    Col("start_ns", pl.Int64, "ns"),
    Col("end_ns", pl.Int64, "ns"),
    Col("dur_ns", pl.Int64, "ns", "end_ns - start_ns"),
    Col("comm_ns", pl.Int64, "ns", "communication ops nested in the span (same thread), union, clipped"),
    Col("busy_ns", pl.Int64, "ns", "dur_ns - comm_ns: the stage's own work on this microbatch"),
    Col("phase", pl.String, "", '"warmup" | "steady" | "cooldown"; null when the schedule is not recognised'),
)

#: One row per (rank, step): the stage's bubble within its pipeline's window of that step.
PIPELINE_STAGE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("pipeline", pl.String),
    Col("stage", pl.Int64),
    Col("n_stages", pl.Int64, "", "p"),
    Col("n_microbatches", pl.Int64, "", "m"),
    Col("schedule", pl.String, "", '"1f1b" | "gpipe" | "unrecognised"'),
    Col(
        "start_ns", pl.Int64, "ns", "pipeline window: first microbatch start on any stage of the pipeline ..."
    ),
    Col("end_ns", pl.Int64, "ns", "... to the last microbatch end on any stage"),
    Col("window_ns", pl.Int64, "ns"),
    Col("busy_ns", pl.Int64, "ns", "sum of this stage's microbatch busy_ns"),
    Col("bubble_ns", pl.Int64, "ns", "window_ns - busy_ns"),
    Col("bubble_pct", pl.Float64, "%", "100 * bubble_ns / window_ns"),
    Col("theory_pct", pl.Float64, "%", "100 * (p-1)/(m+p-1) for a recognised schedule, else null"),
    Col("warmup_ns", pl.Int64, "ns", "phases partition the window (null when not recognised)"),
    Col("steady_ns", pl.Int64, "ns"),
    Col("cooldown_ns", pl.Int64, "ns"),
    Col("warmup_bubble_ns", pl.Int64, "ns", "bubble inside each phase (they sum to bubble_ns)"),
    Col("steady_bubble_ns", pl.Int64, "ns"),
    Col("cooldown_bubble_ns", pl.Int64, "ns"),
)


@dataclass
class PipelineResult:
    """The pipeline view of a run (docs/analyses.md, "Pipeline bubbles")."""

    microbatches: pl.DataFrame  # PIPELINE_MB_SCHEMA
    stages: pl.DataFrame  # PIPELINE_STAGE_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"pipeline_microbatches": self.microbatches, "pipeline_stages": self.stages}
