"""Typed result of the pipeline view (``analysis/pipeline.py``): microbatch spans, bubbles per
stage and step, and the schedule's phases. Definitions in docs/analyses.md, "Pipeline bubbles"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: One row per labelled microbatch forward or backward on one rank.
PIPELINE_MB_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "step": pl.Int64,  # the ProfilerStep#N the span starts in (null: outside every step)
    "pipeline": pl.String,  # the pipeline-parallel process group ("" without one)
    "stage": pl.Int64,  # the rank's position in its pipeline group (0 = first stage)
    "kind": pl.String,  # "forward" | "backward"
    "microbatch": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "dur_ns": pl.Int64,  # end_ns - start_ns
    "comm_ns": pl.Int64,  # communication ops nested in the span (same thread), union, clipped
    "busy_ns": pl.Int64,  # dur_ns - comm_ns: the stage's own work on this microbatch
    "phase": pl.String,  # "warmup" | "steady" | "cooldown"; null when the schedule is not recognised
}

#: One row per (rank, step): the stage's bubble within its pipeline's window of that step.
PIPELINE_STAGE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "pipeline": pl.String,
    "stage": pl.Int64,
    "n_stages": pl.Int64,  # p
    "n_microbatches": pl.Int64,  # m
    "schedule": pl.String,  # "1f1b" | "gpipe" | "unrecognised"
    "start_ns": pl.Int64,  # pipeline window: first microbatch start on any stage of the pipeline ...
    "end_ns": pl.Int64,  # ... to the last microbatch end on any stage
    "window_ns": pl.Int64,
    "busy_ns": pl.Int64,  # sum of this stage's microbatch busy_ns
    "bubble_ns": pl.Int64,  # window_ns - busy_ns
    "bubble_pct": pl.Float64,  # 100 * bubble_ns / window_ns
    "theory_pct": pl.Float64,  # 100 * (p-1)/(m+p-1) for a recognised schedule, else null
    "warmup_ns": pl.Int64,  # phases partition the window (null when not recognised)
    "steady_ns": pl.Int64,
    "cooldown_ns": pl.Int64,
    "warmup_bubble_ns": pl.Int64,  # bubble inside each phase (they sum to bubble_ns)
    "steady_bubble_ns": pl.Int64,
    "cooldown_bubble_ns": pl.Int64,
}


@dataclass
class PipelineResult:
    """The pipeline view of a run (docs/analyses.md, "Pipeline bubbles")."""

    microbatches: pl.DataFrame  # PIPELINE_MB_SCHEMA
    stages: pl.DataFrame  # PIPELINE_STAGE_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"pipeline_microbatches": self.microbatches, "pipeline_stages": self.stages}
