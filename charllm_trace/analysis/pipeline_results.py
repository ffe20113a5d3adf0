"""Typed result of the pipeline view (``analysis/pipeline.py``): microbatch spans, bubbles per
stage and step, and the schedule's phases. Definitions in docs/analyses.md, "Pipeline bubbles"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Columns, frame_columns
from charllm_trace.analysis.registry import Framed

PIPELINE_MB_SCHEMA: Columns = frame_columns("pipeline_microbatches")
PIPELINE_STAGE_SCHEMA: Columns = frame_columns("pipeline_stages")


@dataclass
class PipelineResult(Framed):
    """The pipeline view of a run (docs/analyses.md, "Pipeline bubbles")."""

    microbatches: pl.DataFrame  # PIPELINE_MB_SCHEMA
    stages: pl.DataFrame  # PIPELINE_STAGE_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
