"""The what-if result (``analysis.whatif``): measured vs PREDICTED per (rank, step), and what the
prediction rests on (``analysis.whatif_spread``). Re-exported by ``analysis.results``."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.schemas import WHATIF_SCHEMA  # noqa: F401 - re-exported


@dataclass
class WhatIfResult(TimelineResult):
    """A what-if replay: lags re-timed under the keys, the graph re-timed (PREDICTED figures)."""

    steps: pl.DataFrame  # WHATIF_SCHEMA
    factors: dict[str, float]
    fixed_wait_pct: float | None = None  # % of the measured whole-trace critical paths that is waiting the
    # graph does not explain (kept as measured by the replay); null without timestamps
    # what the prediction rests on (analysis/whatif_spread.py): % of the measured whole-trace
    # critical paths on inferred edges (wake-ups, thread starts), and the prediction over steps
    # (every rank's steps; the whole-trace rows where there are none): min-max and median
    inferred_pct: float | None = None
    n_steps: int = 0
    measured_median_ns: int | None = None
    predicted_median_ns: int | None = None
    predicted_low_ns: int | None = None
    predicted_high_ns: int | None = None
    change_median_pct: float | None = None
    change_low_pct: float | None = None
    change_high_pct: float | None = None
