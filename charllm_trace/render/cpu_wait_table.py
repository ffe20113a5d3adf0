"""The terminal tables of ``charllm-trace cpu-wait`` and of ``analyze``'s CPU-wait section
(formatting only: the figures come from :mod:`charllm_trace.analysis.cpu_wait`). Fit 80 columns."""

from __future__ import annotations

from functools import partial

import polars as pl
from rich.console import Console

from charllm_trace.analysis.cpu_wait_results import CpuWaitResult
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.table_style import dim_line, plain_table
from charllm_trace.render.units import ms

#: host-blamed GPU idle intervals listed (the longest); the JSON has every one
TOP_IDLE = 10


_ms = partial(ms, digits=1)


def render_cpu_wait(
    df: pl.DataFrame, notes: list[str], console: Console, quota: dict[str, float] | None = None
) -> None:
    t = plain_table(
        "The launching thread per step (ms): is the CPU starving the GPU?",
        [("rank", "right"), ("step", "right"), ("tid", "right"), ("window", "right"), ("run", "right"),
         ("wait", "right"), ("other", "right"), ("wait%", "right"), ("GPU idle", "right"),
         ("wait in idle", "right"), ("throttled", "right")],
    )  # fmt: skip
    for r in df.iter_rows(named=True):
        t.add_row(str(r["rank"]), str(r["step"]), str(r["tid"]), _ms(r["window_ns"]), _ms(r["run_ns"]),
                  _ms(r["wait_ns"]), _ms(r["other_ns"]), f"{r['wait_pct']:.1f}", _ms(r["gpu_idle_ns"]),
                  _ms(r["idle_wait_ns"]), _ms(r["throttled_ns"]))  # fmt: skip
    console.print(t)
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
    t = plain_table(
        f"GPU idle blamed on the host: {idle.height} intervals, the longest (ms)",
        [("rank", "right"), ("step", "right"), ("phase", "left"), ("idle", "right"), ("late", "right"),
         ("run", "right"), ("wait", "right"), ("other", "right"), ("throttled", "right"), ("call", "left")],
    )  # fmt: skip
    for r in idle.sort("dur_ns", descending=True).head(TOP_IDLE).iter_rows(named=True):
        t.add_row(str(r["rank"]), "-" if r["step"] is None else str(r["step"]), r["phase"] or "-",
                  _ms(r["dur_ns"]), _ms(r["late_ns"]), _ms(r["run_ns"]), _ms(r["wait_ns"]), _ms(r["other_ns"]),
                  _ms(r["throttled_ns"]), r["call_name"] or "-")  # fmt: skip
    console.print(t)
    dim_line(console, "  late = from the GPU going idle to the next operator's launch call; run / wait / other: "
             "the launching thread during the idle time")  # fmt: skip


def _phase_table(ph: pl.DataFrame, console: Console) -> None:
    t = plain_table(
        "The launching thread per phase (ms)",
        [("rank", "right"), ("step", "right"), ("phase", "left"), ("n", "right"), ("cpu", "right"),
         ("run", "right"), ("wait", "right"), ("other", "right"), ("wait%", "right"), ("host idle", "right"),
         ("wait in it", "right")],
    )  # fmt: skip
    for r in ph.iter_rows(named=True):
        t.add_row(str(r["rank"]), "all" if r["step"] is None else str(r["step"]), r["phase"], str(r["n"]),
                  _ms(r["cpu_ns"]), _ms(r["run_ns"]), _ms(r["wait_ns"]), _ms(r["other_ns"]),
                  "-" if r["wait_pct"] is None else f"{r['wait_pct']:.1f}", _ms(r["host_idle_ns"]),
                  _ms(r["host_idle_wait_ns"]))  # fmt: skip
    console.print(t)


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


def cpu_wait_table(res: RunAnalysis, console: Console) -> None:
    """The tables and a blank line, only for a run with CPU scheduler telemetry (collect
    --cpu-hz; the analysis registry's terminal renderer of ``cpu_wait``)."""
    if res.cpu_wait is not None:
        render_cpu_wait_analysis(res.cpu_wait, console)
        console.print()
