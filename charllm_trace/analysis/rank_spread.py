"""Per parallelism dimension, the spread over ranks of exposed communication and step time:
min / median / p90 / max and the worst rank, one row per (dimension, measure), so a job of
thousands of ranks reads in a few lines (issue 11).

From the overlap analysis' rows (``OVERLAP_SCHEMA`` per rank, ``OVERLAP_GROUP_SCHEMA`` per
dimension):

- ``exposed_comm_ns``: the rank's exposed communication over the whole trace (the step-null row);
  under dimension "all" all of the rank's communication, under a dimension that dimension's
  communication against all the rank's compute;
- ``step_ns``: the rank's mean step time (its per-step rows' ``span_ns``; only with steps);
- ``span_ns``: the rank's analysed window (whole trace), when it has no steps.

Quantiles interpolate linearly between ranks (numpy's default). A dimension that no process
group is named after (``analysis/parallel.py``) has no row."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.results import frame
from charllm_trace.analysis.spread_results import RANK_SPREAD_SCHEMA
from charllm_trace.analysis.step_cuts import whole_steps


def _spread(values: pl.DataFrame, dim: str, measure: str) -> pl.DataFrame:
    """``values``: columns rank, v (one row per rank, v non-null) -> one RANK_SPREAD_SCHEMA row."""
    v = pl.col("v").cast(pl.Float64)
    return values.select(
        pl.lit(dim).alias("dim"),
        pl.lit(measure).alias("measure"),
        pl.len().cast(pl.Int64).alias("n_ranks"),
        v.min().alias("min_ns"),
        v.quantile(0.5, "linear").alias("median_ns"),
        v.quantile(0.9, "linear").alias("p90_ns"),
        v.max().alias("max_ns"),
        pl.col("rank").sort_by(["v", "rank"], descending=[True, False]).first().alias("worst_rank"),
    )


def rank_spread(per_rank: pl.DataFrame, per_dim: pl.DataFrame) -> pl.DataFrame:
    """RANK_SPREAD_SCHEMA rows from the overlap rows of several ranks (empty without rows)."""
    rows: list[pl.DataFrame] = []
    whole = per_rank.filter(pl.col("step").is_null())
    steps, _ = whole_steps(per_rank.filter(pl.col("step").is_not_null()))  # cut steps left out

    def add(df: pl.DataFrame, dim: str, measure: str) -> None:
        df = df.filter(pl.col("v").is_not_null())
        if df.height:
            rows.append(_spread(df, dim, measure))

    add(whole.select("rank", v=pl.col("exposed_comm_ns")), "all", "exposed_comm_ns")
    if steps.height:
        add(steps.group_by("rank").agg(v=pl.col("span_ns").mean()), "all", "step_ns")
    else:
        add(whole.select("rank", v=pl.col("span_ns")), "all", "span_ns")
    dims = per_dim.filter(pl.col("step").is_null() & pl.col("dim").is_not_null())
    for (dim,), part in sorted(dims.group_by("dim"), key=lambda kv: str(kv[0][0])):
        add(part.group_by("rank").agg(v=pl.col("exposed_comm_ns").sum()), str(dim), "exposed_comm_ns")
    if not rows:
        return frame({}, RANK_SPREAD_SCHEMA)
    return frame(pl.concat(rows, how="vertical_relaxed"), RANK_SPREAD_SCHEMA)
