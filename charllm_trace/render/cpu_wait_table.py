"""The terminal tables of ``charllm-trace cpu-wait`` and of ``analyze``'s CPU-wait section
(formatting only: the figures come from :mod:`charllm_trace.analysis.cpu_wait`). Fit 80 columns."""

from __future__ import annotations

from functools import partial

import polars as pl
from rich.console import Console

from charllm_trace.analysis.cpu_wait_results import (
    CPU_WAIT_IDLE_SCHEMA,
    CPU_WAIT_PHASE_SCHEMA,
    CPU_WAIT_SCHEMA,
    CpuWaitResult,
)
from charllm_trace.render.coltable import Layout, Show, fit_table
from charllm_trace.render.table_style import dim_line, when_present
from charllm_trace.render.units import ms

#: host-blamed GPU idle intervals listed (the longest); the JSON has every one
TOP_IDLE = 10

#: the titles say ms: no unit in the headers
_opts: dict = {"units": {}, "time": partial(ms, digits=1)}
STEPS = Layout(
    CPU_WAIT_SCHEMA,
    ["rank", "step", "tid", "window_ns", "run_ns", "wait_ns", "other_ns", Show("wait_pct", "wait%"),
     Show("gpu_idle_ns", "GPU idle"), Show("idle_wait_ns", "wait in idle"), "throttled_ns"],
    **_opts,
)  # fmt: skip
IDLE = Layout(
    CPU_WAIT_IDLE_SCHEMA,
    ["rank", "step", "phase", Show("dur_ns", "idle"), "late_ns", "run_ns", "wait_ns", "other_ns", "throttled_ns",
     Show("call_name", "call")],
    **_opts,
)  # fmt: skip
PHASES = Layout(
    CPU_WAIT_PHASE_SCHEMA,
    ["rank", Show("step", missing="all"), "phase", "n", "cpu_ns", "run_ns", "wait_ns", "other_ns",
     Show("wait_pct", "wait%"), "host_idle_ns", Show("host_idle_wait_ns", "wait in it")],
    **_opts,
)  # fmt: skip


def render_cpu_wait(
    df: pl.DataFrame, notes: list[str], console: Console, quota: dict[str, float] | None = None
) -> None:
    console.print(fit_table("The launching thread per step (ms): is the CPU starving the GPU?", STEPS, df))
    dim_line(
        console,
        "  run = on a CPU; wait = runnable, waiting for a core; other = sleeping or blocked "
        "(docs/analyses.md, section 16)",
    )
    if quota is not None:  # the quota beside the throttling figures
        dim_line(console, f"  cgroup CPU quota (cpu.max): {quota['cores']:.2f} cores "
                 f"({int(quota['quota_us'])} µs per {int(quota['period_us'])} µs)")  # fmt: skip
    for n in notes:
        dim_line(console, f"  note: {n}")


def _idle_table(idle: pl.DataFrame, console: Console) -> None:
    top = idle.sort("dur_ns", descending=True).head(TOP_IDLE)
    console.print(
        fit_table(f"GPU idle blamed on the host: {idle.height} intervals, the longest (ms)", IDLE, top)
    )
    dim_line(console, "  late = from the GPU going idle to the next operator's launch call; run / wait / other: "
             "the launching thread during the idle time")  # fmt: skip


def _phase_table(ph: pl.DataFrame, console: Console) -> None:
    console.print(fit_table("The launching thread per phase (ms)", PHASES, ph))


def render_cpu_wait_analysis(cw: CpuWaitResult, console: Console) -> None:
    """``analyze``'s section: per step, the host-blamed idle intervals, per phase."""
    render_cpu_wait(cw.steps, [], console, cw.quota)
    if cw.idle.height:
        console.print()
        _idle_table(cw.idle, console)
    if cw.phases.height:
        console.print()
        _phase_table(cw.phases, console)
    for n in cw.notes:
        dim_line(console, f"  note: {n}")


cpu_wait_table = when_present(
    "cpu_wait", lambda res, console: render_cpu_wait_analysis(res.cpu_wait, console)
)
