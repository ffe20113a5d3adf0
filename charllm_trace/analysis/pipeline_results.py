"""Typed result of the pipeline view (``analysis/pipeline.py``): microbatch spans, bubbles per
stage and step, and the schedule's phases. Definitions in docs/analyses.md, "Pipeline bubbles"."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.schemas import PIPELINE_MB_SCHEMA, PIPELINE_STAGE_SCHEMA  # noqa: F401 - re-exported


@dataclass
class PipelineResult(TimelineResult):
    """The pipeline view of a run (docs/analyses.md, "Pipeline bubbles")."""

    microbatches: pl.DataFrame  # PIPELINE_MB_SCHEMA
    stages: pl.DataFrame  # PIPELINE_STAGE_SCHEMA
