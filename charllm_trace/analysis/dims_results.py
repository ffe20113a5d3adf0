"""Typed result of the headline figures by parallel dimension (``analysis/dims.py``): one row per
dimension gathered from the overlap, bandwidth, waiting/transfer and pipeline analyses, and the
message-size histogram of each dimension. Definitions in docs/analyses.md, "By dimension"."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.schemas import DIM_SIZES_SCHEMA, DIMS_SCHEMA  # noqa: F401 - re-exported


@dataclass
class DimsResult(TimelineResult):
    """Every headline figure by parallel dimension (docs/analyses.md, "By dimension")."""

    dims: pl.DataFrame  # DIMS_SCHEMA
    sizes: pl.DataFrame  # DIM_SIZES_SCHEMA
