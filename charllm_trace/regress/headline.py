"""The headline metrics of a run: what ``baseline`` records and ``check`` compares.

Each metric is extracted in exactly one function below, from the typed results
of :mod:`charllm_trace.analysis` (never from the trace directly), so that a
baseline means the same numbers ``analyze`` prints. Keys are stable across runs
of the same job (``overlap_pct/rank=0/step=5``); an analysis that was skipped
for a run simply yields no metrics (``check`` then reports them as missing).

=================================================  ============  ======================================
key                                                class         source
=================================================  ============  ======================================
``overlap_pct/rank=R/step=S``                      overlap       OverlapResult.per_rank.overlap_pct
``exposed_comm_ms/rank=R/step=S``                  exposed_comm  OverlapResult.per_rank.exposed_comm_ns
``busbw_median_gbps/coll=T/pg=G/size=B``           busbw         median of BandwidthResult.collectives
``energy_j/rank=R/phase=P``                        energy        EnergyResult.by, group "phase"
``energy_j/rank=R/device=D/total``                 energy        EnergyResult.totals.total_j
``power_peak_w/rank=R/device=D``                   power         PowerResult.per_step (whole window)
``power_mean_w/rank=R/device=D``                   power         PowerResult.per_step (whole window)
``throttle_ms/rank=R/device=D``                    throttle      PowerResult.per_step.throttled_ns
=================================================  ============  ======================================

``S`` is the ``ProfilerStep`` number or ``all`` for the whole trace; ``R`` is
``none`` when the trace had no rank.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.analysis.results import (
    BandwidthResult,
    EnergyResult,
    OverlapResult,
    PowerResult,
    RunAnalysis,
)
from charllm_trace.regress.baseline import BUSBW_MEDIAN, Metric

NS_PER_MS = 1e6


def _tag(v: Any, *, null: str) -> str:
    return null if v is None else str(v)


def _rank(v: Any) -> str:
    return _tag(v, null="none")


def _step(v: Any) -> str:
    return _tag(v, null="all")


def overlap_metrics(r: OverlapResult) -> list[Metric]:
    """Overlap % and exposed communication per rank and step (rows with communication only)."""
    out: list[Metric] = []
    df = r.per_rank.filter(pl.col("comm_ns") > 0).sort(["rank", "step"], nulls_last=True)
    for row in df.select("rank", "step", "overlap_pct", "exposed_comm_ns").iter_rows(named=True):
        where = f"rank={_rank(row['rank'])}/step={_step(row['step'])}"
        if row["overlap_pct"] is not None:
            out.append(Metric.of(f"overlap_pct/{where}", "overlap", row["overlap_pct"]))
        if row["exposed_comm_ns"] is not None:
            out.append(
                Metric.of(f"exposed_comm_ms/{where}", "exposed_comm", row["exposed_comm_ns"] / NS_PER_MS)
            )
    return out


def busbw_metrics(r: BandwidthResult) -> list[Metric]:
    """Median bus bandwidth of the collective instances of each (type, process group, size bucket).

    Collectives with bus factor 0 (a group of one rank: nothing crosses a link, busbw is 0 at any
    speed) give no metric: it could never regress."""
    df = (
        r.collectives.filter(
            pl.col("busbw_gbps").is_not_null()
            & pl.col("busbw_gbps").is_finite()
            & (pl.col("bus_factor").is_null() | (pl.col("bus_factor") > 0))
        )
        .group_by("coll_type", "pg_name", "size_bucket")
        .agg(pl.col("busbw_gbps").median().alias("median"))
        .sort(["coll_type", "pg_name", "size_bucket"], nulls_last=True)
    )
    return [
        Metric.of(
            f"{BUSBW_MEDIAN}coll={_tag(row['coll_type'], null='unknown')}/pg={_tag(row['pg_name'], null='none')}"
            f"/size={_tag(row['size_bucket'], null='unknown')}",
            "busbw",
            row["median"],
        )
        for row in df.iter_rows(named=True)
    ]


def energy_metrics(r: EnergyResult) -> list[Metric]:
    """Energy per operator class (phase: forward / backward / optimizer / communication ...) and total."""
    out: list[Metric] = []
    phases = (
        r.group("phase")
        .filter(pl.col("energy_j").is_not_null())
        .group_by("rank", "key")
        .agg(pl.col("energy_j").sum())
        .sort(["rank", "key"], nulls_last=True)
    )
    for row in phases.iter_rows(named=True):
        out.append(
            Metric.of(
                f"energy_j/rank={_rank(row['rank'])}/phase={_tag(row['key'], null='none')}",
                "energy",
                row["energy_j"],
            )
        )
    totals = r.totals.filter(pl.col("total_j").is_not_null()).sort(["rank", "device"], nulls_last=True)
    for row in totals.iter_rows(named=True):
        out.append(
            Metric.of(
                f"energy_j/rank={_rank(row['rank'])}/device={_tag(row['device'], null='none')}/total",
                "energy",
                row["total_j"],
            )
        )
    return out


def power_metrics(r: PowerResult) -> list[Metric]:
    """Peak and mean power and throttle time per rank and device over the whole telemetry window."""
    out: list[Metric] = []
    whole = r.per_step.filter(pl.col("step").is_null()).sort(["rank", "device"], nulls_last=True)
    for row in whole.iter_rows(named=True):
        where = f"rank={_rank(row['rank'])}/device={_tag(row['device'], null='none')}"
        if row["peak_w"] is not None:
            out.append(Metric.of(f"power_peak_w/{where}", "power", row["peak_w"]))
        if row["avg_w"] is not None:
            out.append(Metric.of(f"power_mean_w/{where}", "power", row["avg_w"]))
        if row["throttled_ns"] is not None:
            out.append(Metric.of(f"throttle_ms/{where}", "throttle", row["throttled_ns"] / NS_PER_MS))
    return out


def headline(analysis: RunAnalysis) -> list[Metric]:
    """All headline metrics of a run's analysis, sorted by key."""
    out: list[Metric] = []
    if analysis.overlap is not None:
        out += overlap_metrics(analysis.overlap)
    if analysis.bandwidth is not None:
        out += busbw_metrics(analysis.bandwidth)
    if analysis.energy is not None:
        out += energy_metrics(analysis.energy)
    if analysis.power is not None:
        out += power_metrics(analysis.power)
    return sorted(out, key=lambda m: m.key)
