"""Stragglers: per process group and rank, how often the rank arrived last at a collective
and how late it was, over the collectives matched across ranks (``bandwidth.match_ranks``'
keys: ``coll_seq``, else each group's order)."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.results import STRAGGLER_SCHEMA, frame


def stragglers(coll: pl.DataFrame) -> pl.DataFrame:
    """STRAGGLER_SCHEMA rows from the per-instance collectives (COLLECTIVE_SCHEMA) of several
    ranks; empty with fewer than two ranks or no start times."""
    if coll.height == 0 or coll["rank"].n_unique() < 2 or coll["start_ns"].is_null().all():
        return frame({}, STRAGGLER_SCHEMA)
    c = (
        coll.filter(pl.col("start_ns").is_not_null())
        .sort("start_ns")
        .with_columns(_order=pl.int_range(pl.len()).over(["rank", "pg_name"]))
        .with_columns(_key=pl.coalesce(pl.col("coll_seq"), pl.col("_order")))
        .with_columns(
            _n=pl.col("rank").n_unique().over(["pg_name", "_key"]),
            _late=pl.col("start_ns") - pl.col("start_ns").min().over(["pg_name", "_key"]),
            _last=pl.col("rank") == pl.col("rank").sort_by("start_ns").last().over(["pg_name", "_key"]),
        )
        .filter(pl.col("_n") >= 2)
    )
    if c.height == 0:
        return frame({}, STRAGGLER_SCHEMA)
    out = (
        c.group_by(["pg_name", "rank"])
        .agg(
            pl.col("dim").first(),
            pl.len().alias("n_matched"),
            pl.col("_last").sum().cast(pl.Int64).alias("n_last"),
            pl.col("_late").mean().alias("mean_late_ns"),
            pl.col("_late").max().alias("max_late_ns"),
        )
        .with_columns(last_pct=100.0 * pl.col("n_last") / pl.col("n_matched"))
        .sort(
            ["pg_name", "n_last", "mean_late_ns", "rank"],
            descending=[False, True, True, False],
            nulls_last=True,
        )
    )
    return frame(out, STRAGGLER_SCHEMA)
