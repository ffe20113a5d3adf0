"""The columns of the spread over ranks (``analysis/rank_spread.py``): one row per parallelism
dimension and measure, compact however many ranks there are. Kept apart from the analysis so that
the result types (``analysis/results.py``) hold it without importing any analysis."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: Per dimension ("all": the rank's whole communication) and measure, the distribution over ranks.
RANK_SPREAD_SCHEMA: Columns = columns(
    Col("dim", pl.String, "", 'tp / cp / ep / dp / pp (analysis/parallel.py), "all" for the whole rank'),
    Col(
        "measure", pl.String, "", "exposed_comm_ns, step_ns (mean step of the rank) or span_ns (whole trace)"
    ),
    Col("n_ranks", pl.Int64, "", "ranks with a value"),
    Col("min_ns", pl.Float64, "ns", "smallest value over the ranks"),
    Col("median_ns", pl.Float64, "ns", "median over the ranks (linear interpolation)"),
    Col("p90_ns", pl.Float64, "ns", "90th percentile over the ranks (linear interpolation)"),
    Col("max_ns", pl.Float64, "ns", "largest value over the ranks"),
    Col("worst_rank", pl.Int64, "", "the rank with the largest value (lowest such rank on ties)"),
)


def empty_rank_spread() -> pl.DataFrame:
    return pl.DataFrame(schema=RANK_SPREAD_SCHEMA)
