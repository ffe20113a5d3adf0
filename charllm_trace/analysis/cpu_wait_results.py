"""Typed result of "is the CPU starving the GPU?" (``analysis/cpu_wait.py``; issue 24; definitions
in docs/analyses.md, "CPU scheduler telemetry"). Present in ``analyze`` only for runs with CPU
scheduler telemetry (``collect --cpu-hz``): its frames are not in every document."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: One row per (rank, step): how the launching thread spent the step window.
CPU_WAIT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "tid": pl.Int64,  # the launching thread
    "window_ns": pl.Int64,  # the step's window (GPU time; CPU traces: the step's range)
    "run_ns": pl.Int64,  # the thread on a CPU
    "wait_ns": pl.Int64,  # runnable, waiting for a core
    "other_ns": pl.Int64,  # window - run - wait: sleeping or blocked
    "wait_pct": pl.Float64,  # 100 * wait / window
    "gpu_idle_ns": pl.Int64,  # no GPU activity in the window (null: no GPU activity in the trace)
    "gpu_idle_pct": pl.Float64,  # 100 * gpu_idle / window
    "idle_wait_ns": pl.Int64,  # the thread's wait during that idle time
    "throttled_ns": pl.Int64,  # the cgroup throttled during the window (null: not recorded)
}

#: One row per GPU idle interval blamed on the host: the GPU (every stream) idle from start to
#: end, and the launch call of the operator that ended it began after the idle began (a late launch).
CPU_WAIT_IDLE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "step": pl.Int64,  # the step window holding the interval's start (null: none)
    "phase": pl.String,  # the phase range (iterations' PHASES) holding its start (null: none)
    "tid": pl.Int64,  # the launching thread
    "start_ns": pl.Int64,  # the GPU's last activity before it ended
    "end_ns": pl.Int64,  # the next GPU operator started
    "dur_ns": pl.Int64,  # end - start
    "late_ns": pl.Int64,  # from start to the next operator's launch call: how late the launch was
    "call_name": pl.String,  # that launch call (cudaLaunchKernel, cudaGraphLaunch ...)
    "run_ns": pl.Int64,  # the launching thread on a CPU during the interval
    "wait_ns": pl.Int64,  # runnable, waiting for a core
    "other_ns": pl.Int64,  # dur - run - wait: sleeping or blocked
    "throttled_ns": pl.Int64,  # the cgroup throttled during the interval (null: not recorded)
}

#: Per (rank, step, phase) and per (rank, phase) over the trace (step null): the launching
#: thread during the phase's ranges, and the host-blamed GPU idle that began inside them.
CPU_WAIT_PHASE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "phase": pl.String,
    "n": pl.Int64,  # outermost ranges of the phase (as the phases frame)
    "cpu_ns": pl.Int64,  # their summed durations (CPU time)
    "run_ns": pl.Int64,  # the launching thread on a CPU during them
    "wait_ns": pl.Int64,  # runnable, waiting for a core
    "other_ns": pl.Int64,  # cpu - run - wait: sleeping or blocked
    "wait_pct": pl.Float64,  # 100 * wait / cpu
    "host_idle_ns": pl.Int64,  # GPU idle blamed on the host that began in the phase
    "host_idle_wait_ns": pl.Int64,  # the thread's wait during that idle
}


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


#: frame name -> (RunAnalysis field, columns): frames that appear in ``analyze``'s document only
#: when their analysis ran (a run with CPU scheduler telemetry), unlike ``FRAME_SCHEMAS``.
CPU_WAIT_FRAMES: dict[str, tuple[str, dict[str, pl.DataType]]] = {
    "cpu_wait": ("cpu_wait", CPU_WAIT_SCHEMA),
    "cpu_wait_idle": ("cpu_wait", CPU_WAIT_IDLE_SCHEMA),
    "cpu_wait_phases": ("cpu_wait", CPU_WAIT_PHASE_SCHEMA),
}
