"""Typed result of "is the CPU starving the GPU?" (``analysis/cpu_wait.py``; issue 24; definitions
in docs/analyses.md, "CPU scheduler telemetry"). Present in ``analyze`` only for runs with CPU
scheduler telemetry (``collect --cpu-hz``): its frames are not in every document."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: One row per (rank, step): how the launching thread spent the step window.
CPU_WAIT_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("tid", pl.Int64, "", "the launching thread"),
    Col("window_ns", pl.Int64, "ns", "the step's window (GPU time; CPU traces: the step's range)"),
    Col("run_ns", pl.Int64, "ns", "the thread on a CPU"),
    Col("wait_ns", pl.Int64, "ns", "runnable, waiting for a core"),
    Col("other_ns", pl.Int64, "ns", "window - run - wait: sleeping or blocked"),
    Col("wait_pct", pl.Float64, "%", "100 * wait / window"),
    Col("gpu_idle_ns", pl.Int64, "ns", "no GPU activity in the window (null: no GPU activity in the trace)"),
    Col("gpu_idle_pct", pl.Float64, "%", "100 * gpu_idle / window"),
    Col("idle_wait_ns", pl.Int64, "ns", "the thread's wait during that idle time"),
    Col("throttled_ns", pl.Int64, "ns", "the cgroup throttled during the window (null: not recorded)"),
)

#: One row per GPU idle interval blamed on the host: the GPU (every stream) idle from start to
#: end, and the launch call of the operator that ended it began after the idle began (a late launch).
CPU_WAIT_IDLE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64, "", "the step window holding the interval's start (null: none)"),
    Col("phase", pl.String, "", "the phase range (iterations' PHASES) holding its start (null: none)"),
    Col("tid", pl.Int64, "", "the launching thread"),
    Col("start_ns", pl.Int64, "ns", "the GPU's last activity before it ended"),
    Col("end_ns", pl.Int64, "ns", "the next GPU operator started"),
    Col("dur_ns", pl.Int64, "ns", "end - start"),
    Col("late_ns", pl.Int64, "ns", "from start to the next operator's launch call: how late the launch was"),
    Col("call_name", pl.String, "", "that launch call (cudaLaunchKernel, cudaGraphLaunch ...)"),
    Col("run_ns", pl.Int64, "ns", "the launching thread on a CPU during the interval"),
    Col("wait_ns", pl.Int64, "ns", "runnable, waiting for a core"),
    Col("other_ns", pl.Int64, "ns", "dur - run - wait: sleeping or blocked"),
    Col("throttled_ns", pl.Int64, "ns", "the cgroup throttled during the interval (null: not recorded)"),
)

#: Per (rank, step, phase) and per (rank, phase) over the trace (step null): the launching
#: thread during the phase's ranges, and the host-blamed GPU idle that began inside them.
CPU_WAIT_PHASE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("phase", pl.String),
    Col("n", pl.Int64, "", "outermost ranges of the phase (as the phases frame)"),
    Col("cpu_ns", pl.Int64, "ns", "their summed durations (CPU time)"),
    Col("run_ns", pl.Int64, "ns", "the launching thread on a CPU during them"),
    Col("wait_ns", pl.Int64, "ns", "runnable, waiting for a core"),
    Col("other_ns", pl.Int64, "ns", "cpu - run - wait: sleeping or blocked"),
    Col("wait_pct", pl.Float64, "%", "100 * wait / cpu"),
    Col("host_idle_ns", pl.Int64, "ns", "GPU idle blamed on the host that began in the phase"),
    Col("host_idle_wait_ns", pl.Int64, "ns", "the thread's wait during that idle"),
)


@dataclass
class CpuWaitResult:
    """The launching thread's scheduler state per step, per host-blamed GPU idle interval and per
    phase (docs/analyses.md)."""

    steps: pl.DataFrame  # CPU_WAIT_SCHEMA
    idle: pl.DataFrame  # CPU_WAIT_IDLE_SCHEMA
    phases: pl.DataFrame  # CPU_WAIT_PHASE_SCHEMA
    #: the cgroup's CPU quota (cpu.max) as sampled last: quota_us, period_us, cores (quota/period);
    #: None where no quota was recorded (none set, or no cgroup telemetry)
    quota: dict[str, float] | None = None
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"cpu_wait": self.steps, "cpu_wait_idle": self.idle, "cpu_wait_phases": self.phases}
