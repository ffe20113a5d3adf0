"""Pure statistics of a telemetry sample table: achieved rate and sensor update period."""

from __future__ import annotations

import polars as pl


def achieved_rate_hz(samples: pl.DataFrame) -> dict[int, float | None]:
    """Samples per second actually recorded, per device: (n - 1) / (last - first)."""
    if samples.height == 0:
        return {}
    g = (
        samples.group_by("device")
        .agg(pl.len().alias("n"), pl.col("time_ns").min().alias("t0"), pl.col("time_ns").max().alias("t1"))
        .sort("device")
    )
    out: dict[int, float | None] = {}
    for dev, n, t0, t1 in g.iter_rows():
        out[int(dev)] = (n - 1) * 1e9 / (t1 - t0) if n > 1 and t1 > t0 else None
    return out


def sensor_update_period_ns(samples: pl.DataFrame, column: str = "power_w") -> dict[int, int | None]:
    """The sensor's update period per device, detected from runs of repeated values.

    A sensor that refreshes every P ms read at a higher rate returns the same value several
    times in a row; the time between the first samples of consecutive runs is P (rounded to the
    sampling period). Returns the median of those times, or None where the column never changes
    three times (an idle, constant or absent sensor cannot be timed).
    """
    if samples.height == 0 or column not in samples.columns:
        return {}
    s = samples.select("device", "time_ns", column).drop_nulls(column).sort(["device", "time_ns"])
    changes = s.with_columns(
        (pl.col(column) != pl.col(column).shift(1).over("device")).fill_null(True).alias("_chg")
    ).filter(pl.col("_chg"))
    # Drop each device's first run (it began before sampling did), then time the gaps.
    gaps = changes.with_columns((pl.col("time_ns") - pl.col("time_ns").shift(1).over("device")).alias("_gap"))
    gaps = gaps.with_columns(pl.int_range(pl.len()).over("device").alias("_i")).filter(pl.col("_i") >= 2)
    per = gaps.group_by("device").agg(pl.col("_gap").median().alias("p"), pl.len().alias("n"))
    out: dict[int, int | None] = {int(d): None for d in s["device"].unique().to_list()}
    for dev, p, n in per.iter_rows():
        out[int(dev)] = int(p) if p is not None and n >= 2 else None
    return out
