"""Typed result of "is the CPU starving the GPU?" (``analysis/cpu_wait.py``; issue 24; definitions
in docs/analyses.md, "CPU scheduler telemetry"). Present in ``analyze`` only for runs with CPU
scheduler telemetry (``collect --cpu-hz``): its frames are not in every document."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import Result
from charllm_trace.analysis.schemas import CPU_WAIT_IDLE_SCHEMA, CPU_WAIT_PHASE_SCHEMA, CPU_WAIT_SCHEMA  # noqa: F401 - re-exported


@dataclass
class CpuWaitResult(Result):
    """The launching thread's scheduler state per step, per host-blamed GPU idle interval and per
    phase (docs/analyses.md)."""

    steps: pl.DataFrame  # CPU_WAIT_SCHEMA
    idle: pl.DataFrame  # CPU_WAIT_IDLE_SCHEMA
    phases: pl.DataFrame  # CPU_WAIT_PHASE_SCHEMA
    #: the cgroup's CPU quota (cpu.max) as sampled last: quota_us, period_us, cores (quota/period);
    #: None where no quota was recorded (none set, or no cgroup telemetry)
    quota: dict[str, float] | None = None
