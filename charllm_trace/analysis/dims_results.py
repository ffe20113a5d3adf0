"""Typed result of the headline figures by parallel dimension (``analysis/dims.py``): one row per
dimension gathered from the overlap, bandwidth, waiting/transfer and pipeline analyses, and the
message-size histogram of each dimension. Definitions in docs/analyses.md, "By dimension"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Columns, frame_columns
from charllm_trace.analysis.registry import Framed

DIMS_SCHEMA: Columns = frame_columns("dims")
DIM_SIZES_SCHEMA: Columns = frame_columns("dim_msg_sizes")


@dataclass
class DimsResult(Framed):
    """Every headline figure by parallel dimension (docs/analyses.md, "By dimension")."""

    dims: pl.DataFrame  # DIMS_SCHEMA
    sizes: pl.DataFrame  # DIM_SIZES_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
