"""The result type of the run's configuration (``analysis.runconfig``): one row, fixed columns.

Kept apart from ``analysis.results`` (which imports it, and re-exports its names) so that the
result types of other analyses can grow there without pushing that module past its size."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import Result
from charllm_trace.analysis.schemas import CONFIG_SCHEMA  # noqa: F401 - re-exported


@dataclass
class RunConfig(Result):
    """The run's configuration (manifest, layout option, trace metadata); null where unknown."""

    table: pl.DataFrame  # CONFIG_SCHEMA, one row
