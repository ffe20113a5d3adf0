"""The typed result of the time breakdown (:mod:`charllm_trace.analysis.breakdown`); part of
:class:`charllm_trace.analysis.results.RunAnalysis`. Its own module so that the busy results
module stays small; it imports nothing of the analyses (saved results are drawn without them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: The aggregations, stacked in ``BreakdownResult.by`` (column ``group``).
BREAKDOWN_GROUPS = ("category", "kernel", "op", "top_op")

#: Why the breakdown is not computed for a run (``RunAnalysis.skipped["breakdown"]``).
NO_GPU_OPS = "no GPU kernels, memcpys or memsets with a duration in this trace: time breakdown not computed"

#: One row per (rank, step, group, key). ``rank`` null: all ranks together; ``step`` null: the
#: whole trace. ``key`` is the category, kernel name, launching op or top-level op; null for an op
#: that is not known (the launcher is not in the trace). Rows beyond the top N of a (rank, step,
#: group) are summed into one row keyed ``(N others)`` (``other_rows`` N).
BREAKDOWN_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("group", pl.String, "", '"category" | "kernel" | "op" | "top_op"'),
    Col("key", pl.String),
    Col("category", pl.String, "", 'the kernel\'s category (group "category" and "kernel"); null for ops'),
    Col("count", pl.Int64, "", "GPU operators"),
    Col("total_ns", pl.Int64, "ns", "sum of their durations"),
    Col("mean_ns", pl.Float64, "ns", "total_ns / count"),
    Col("max_ns", pl.Int64, "ns", "the longest one"),
    Col("pct", pl.Float64, "", "100 * total_ns / the scope's gpu_time_ns"),
    Col("other_rows", pl.Int64, "", 'for a "(N others)" row, N; else null'),
)

#: One row per (rank, step) (nulls as above): what the percentages are of.
BREAKDOWN_TOTAL_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("count", pl.Int64, "", "GPU operators (kernels, memcpys, memsets) with a duration"),
    Col("gpu_time_ns", pl.Int64, "ns", "sum of their durations (concurrent streams both count)"),
    Col("no_launcher_ns", pl.Int64, "ns", "of which operators whose launching op is not in the trace"),
)


@dataclass
class BreakdownResult:
    """GPU time by category, kernel, launching op and top-level op, per rank and step
    (docs/analyses.md, "Time breakdown")."""

    by: pl.DataFrame  # BREAKDOWN_SCHEMA, the groups stacked (filter on "group")
    totals: pl.DataFrame  # BREAKDOWN_TOTAL_SCHEMA
    top_n: int | None = None  # rows kept per (rank, step, group) other than "category"; None: all
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def group(self, name: str) -> pl.DataFrame:
        """The rows of one aggregation (``BREAKDOWN_GROUPS``)."""
        return self.by.filter(pl.col("group") == name)
