"""Typed results of the GPU idle-time breakdown per stream and the launch statistics
(``analysis/idle_time.py``, ``analysis/launch_stats.py``; docs/analyses.md, "Idle time per GPU
stream" and "Launch statistics"). Times are integer ns; percentages 0..100. ``step`` null: the
whole trace; ``stream`` null in the launch frames: every stream of the rank together."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.schemas import IDLE_TIME_SCHEMA, LAUNCH_SCHEMA, QUEUE_SCHEMA  # noqa: F401 - re-exported

#: HTA's idle categories, in its order.
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")


@dataclass
class IdleTimeResult(TimelineResult):
    """GPU idle time per stream, split into host wait, kernel wait and other (HTA's definition)."""

    streams: pl.DataFrame  # IDLE_TIME_SCHEMA
    kernel_wait_threshold_ns: int = 30_000
    hta_compat: bool = False


@dataclass
class LaunchResult(TimelineResult):
    """CPU launch delay per GPU op, its distribution, short ops and the launch queue per stream."""

    stats: pl.DataFrame  # LAUNCH_SCHEMA
    queue: pl.DataFrame  # QUEUE_SCHEMA
    hta_compat: bool = False
