"""The typed result of the time breakdown (:mod:`charllm_trace.analysis.breakdown`); part of
:class:`charllm_trace.analysis.results.RunAnalysis`. Its own module so that the busy results
module stays small; it imports nothing of the analyses (saved results are drawn without them)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.schemas import BREAKDOWN_SCHEMA, BREAKDOWN_TOTAL_SCHEMA  # noqa: F401 - re-exported

#: The aggregations, stacked in ``BreakdownResult.by`` (column ``group``).
BREAKDOWN_GROUPS = ("category", "kernel", "op", "top_op")

#: Why the breakdown is not computed for a run (``RunAnalysis.skipped["breakdown"]``).
NO_GPU_OPS = "no GPU kernels, memcpys or memsets with a duration in this trace: time breakdown not computed"


@dataclass
class BreakdownResult(TimelineResult):
    """GPU time by category, kernel, launching op and top-level op, per rank and step
    (docs/analyses.md, "Time breakdown")."""

    by: pl.DataFrame  # BREAKDOWN_SCHEMA, the groups stacked (filter on "group")
    totals: pl.DataFrame  # BREAKDOWN_TOTAL_SCHEMA
    top_n: int | None = None  # rows kept per (rank, step, group) other than "category"; None: all

    def group(self, name: str) -> pl.DataFrame:
        """The rows of one aggregation (``BREAKDOWN_GROUPS``)."""
        return self.by.filter(pl.col("group") == name)
