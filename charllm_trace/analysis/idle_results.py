"""Typed results of the GPU idle-time breakdown per stream and the launch statistics
(``analysis/idle_time.py``, ``analysis/launch_stats.py``; docs/analyses.md, "Idle time per GPU
stream" and "Launch statistics"). Times are integer ns; percentages 0..100. ``step`` null: the
whole trace; ``stream`` null in the launch frames: every stream of the rank together."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Columns, frame_columns
from charllm_trace.analysis.registry import Framed

#: HTA's idle categories, in its order.
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")

IDLE_TIME_SCHEMA: Columns = frame_columns("idle_time")
LAUNCH_SCHEMA: Columns = frame_columns("launch_stats")
QUEUE_SCHEMA: Columns = frame_columns("launch_queue")


@dataclass
class IdleTimeResult(Framed):
    """GPU idle time per stream, split into host wait, kernel wait and other (HTA's definition)."""

    streams: pl.DataFrame  # IDLE_TIME_SCHEMA
    kernel_wait_threshold_ns: int = 30_000
    hta_compat: bool = False
    simulated: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class LaunchResult(Framed):
    """CPU launch delay per GPU op, its distribution, short ops and the launch queue per stream."""

    stats: pl.DataFrame  # LAUNCH_SCHEMA
    queue: pl.DataFrame  # QUEUE_SCHEMA
    hta_compat: bool = False
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
