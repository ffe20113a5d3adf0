"""The columns of the spread over ranks (``analysis/rank_spread.py``): one row per parallelism
dimension and measure, compact however many ranks there are. Kept apart from the analysis so that
the result types (``analysis/results.py``) hold it without importing any analysis."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.schemas import RANK_SPREAD_SCHEMA  # noqa: F401 - re-exported


def empty_rank_spread() -> pl.DataFrame:
    return pl.DataFrame(schema=RANK_SPREAD_SCHEMA)
