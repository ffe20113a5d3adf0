"""The result type of the run's configuration (``analysis.runconfig``): one row, fixed columns.

Kept apart from ``analysis.results`` (which imports it, and re-exports its names) so that the
result types of other analyses can grow there without pushing that module past its size."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Columns, frame_columns
from charllm_trace.analysis.registry import Framed

CONFIG_SCHEMA: Columns = frame_columns("config")


@dataclass
class RunConfig(Framed):
    """The run's configuration (manifest, layout option, trace metadata); null where unknown."""

    table: pl.DataFrame  # CONFIG_SCHEMA, one row
    notes: list[str] = field(default_factory=list)
