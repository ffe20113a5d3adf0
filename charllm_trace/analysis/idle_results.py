"""Typed results of the GPU idle-time breakdown per stream and the launch statistics
(``analysis/idle_time.py``, ``analysis/launch_stats.py``; docs/analyses.md, "Idle time per GPU
stream" and "Launch statistics"). Times are integer ns; percentages 0..100. ``step`` null: the
whole trace; ``stream`` null in the launch frames: every stream of the rank together."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: HTA's idle categories, in its order.
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")

#: One row per (rank, step, device, stream): the gaps between consecutive GPU ops on the stream,
#: each given to one category (HTA 0.5.0's ``get_idle_time_breakdown``).
IDLE_TIME_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64, "", "step of the op that ends the gap (its GPU-time step window, as overlap)"),
    Col("device", pl.Int64),
    Col("stream", pl.Int64),
    Col("n_ops", pl.Int64, "", "GPU ops (kernels, memcpys, memsets) on the stream"),
    Col(
        "span_ns", pl.Int64, "ns", "last end of those ops - the start of the first gap (or first op) counted"
    ),
    Col("idle_ns", pl.Int64, "ns", "sum of the gaps (= host_wait + kernel_wait + other)"),
    *(Col(f"{c}_ns", pl.Int64, "ns") for c in IDLE_CATEGORIES),
    *(Col(f"{c}_pct", pl.Float64, "%") for c in IDLE_CATEGORIES),  # of idle_ns; null when idle_ns is 0
    *(Col(f"n_{c}", pl.Int64) for c in IDLE_CATEGORIES),  # gaps counted in each category
    Col("n_unlaunched", pl.Int64, "", "gaps before an op with no launch call in the trace (never host wait)"),
)

#: One row per (rank, step, device, stream); device and stream null: all streams of the rank.
LAUNCH_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("device", pl.Int64),
    Col("stream", pl.Int64),
    Col("n_ops", pl.Int64, "", "GPU ops"),
    Col("n_launched", pl.Int64, "", "of which with a launch call (runtime call by correlation id)"),
    Col(
        "delay_mean_ns",
        pl.Int64,
        "ns",
        "launch delay: call start -> op start (hta_compat: call end, clipped at 0)",
    ),
    Col("delay_p50_ns", pl.Int64, "ns", "percentiles: linear interpolation, rounded to ns"),
    Col("delay_p90_ns", pl.Int64, "ns"),
    Col("delay_p99_ns", pl.Int64, "ns"),
    Col("delay_max_ns", pl.Int64, "ns"),
    Col("n_shorter_than_launch", pl.Int64, "", "ops whose duration < their launch call's duration"),
    Col("shorter_pct", pl.Float64, "%", "of n_launched"),
    Col("queue_max", pl.Int64, "", "launched-not-finished ops, maximum over the window"),
    Col("queue_mean", pl.Float64, "", "time-weighted mean over the window"),
    Col("window_start_ns", pl.Int64, "ns", "the window of the queue figures: the step's ProfilerStep"),
    Col("window_end_ns", pl.Int64, "ns", "window; the whole trace: first launch to last end"),
)

#: The queue length as a compact time series: equal bins over the rank's window (first launch
#: to last end of its GPU ops), one row per (rank, device, stream, bin); stream null: all streams.
QUEUE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("device", pl.Int64),
    Col("stream", pl.Int64),
    Col("bin", pl.Int64),
    Col("start_ns", pl.Int64, "ns"),
    Col("end_ns", pl.Int64, "ns"),
    Col("queue_max", pl.Int64),
    Col("queue_mean", pl.Float64),
)


@dataclass
class IdleTimeResult:
    """GPU idle time per stream, split into host wait, kernel wait and other (HTA's definition)."""

    streams: pl.DataFrame  # IDLE_TIME_SCHEMA
    kernel_wait_threshold_ns: int = 30_000
    hta_compat: bool = False
    simulated: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class LaunchResult:
    """CPU launch delay per GPU op, its distribution, short ops and the launch queue per stream."""

    stats: pl.DataFrame  # LAUNCH_SCHEMA
    queue: pl.DataFrame  # QUEUE_SCHEMA
    hta_compat: bool = False
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
