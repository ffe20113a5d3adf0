"""The HTML report's "Is the CPU starving the GPU?" section: per step, the launching thread's run,
wait (runnable, no core) and other time and its wait during the GPU's idle time; the longest GPU
idle intervals blamed on the host; per phase; the cgroup quota beside the throttling. Drawing only:
every number comes from :class:`charllm_trace.analysis.cpu_wait_results.CpuWaitResult`."""

from __future__ import annotations

from typing import Any

from charllm_trace.analysis.cpu_wait_results import (
    CPU_WAIT_IDLE_SCHEMA,
    CPU_WAIT_PHASE_SCHEMA,
    CPU_WAIT_SCHEMA,
    CpuWaitResult,
)
from charllm_trace.render.coltable import Show
from charllm_trace.render.report_sections import html_layout, html_rows, notes_list

CPU_WAIT_NOTE = (
    "the launching thread = the thread of the rank with the most kernel-launch calls; run = on a CPU, wait = "
    "runnable but waiting for a core, other = sleeping or blocked, from its schedstat samples (interpolated); "
    "GPU idle blamed on the host = no GPU activity until an operator whose launch call began after the idle did "
    "(docs/analyses.md, CPU scheduler telemetry)"
)
TOP_IDLE = 16


STEPS = html_layout(
    CPU_WAIT_SCHEMA,
    ["rank", "step", "tid", "window_ns", "run_ns", "wait_ns", "other_ns", Show("gpu_idle_pct", "GPU idle %"),
     Show("idle_wait_ns", "wait in idle ms"), "throttled_ns"],
)  # fmt: skip
IDLE = html_layout(
    CPU_WAIT_IDLE_SCHEMA,
    ["rank", "step", "phase", Show("dur_ns", "idle ms"), "late_ns", "run_ns", "wait_ns", "other_ns", "throttled_ns",
     Show("call_name", "launch call")],
)  # fmt: skip
PHASES = html_layout(
    CPU_WAIT_PHASE_SCHEMA,
    ["rank", Show("step", missing="all"), "phase", Show("n", "ranges"), Show("cpu_ns", "CPU ms"), "run_ns", "wait_ns",
     "wait_pct", Show("host_idle_ns", "host-blamed idle ms"), Show("host_idle_wait_ns", "wait in it ms")],
)  # fmt: skip


def cpu_wait_parts(cw: CpuWaitResult | None) -> list[str]:
    """The section's tables (nothing without CPU scheduler telemetry)."""
    if cw is None or (cw.steps.height == 0 and cw.idle.height == 0):
        return []
    out = [html_rows(STEPS, cw.steps)]
    if cw.quota is not None:
        q = cw.quota
        out.append(f"<p>cgroup CPU quota (cpu.max): {q['cores']:.2f} cores ({int(q['quota_us'])} µs per "
                   f"{int(q['period_us'])} µs)</p>")  # fmt: skip
    if cw.idle.height:
        idle = cw.idle.sort("dur_ns", descending=True).head(TOP_IDLE)
        out.append(
            f"<p>GPU idle blamed on the host: {cw.idle.height} intervals; the longest {idle.height}</p>"
        )
        out.append(html_rows(IDLE, idle))
    if cw.phases.height:
        out.append(html_rows(PHASES, cw.phases))
    return [*out, notes_list(cw.notes)]


def cpu_wait_section(data: Any, rep: Any) -> None:
    """The report's section, only for a run with CPU scheduler telemetry (the analysis registry's
    HTML renderer of ``cpu_wait``)."""
    if parts := cpu_wait_parts(data.results.get("cpu_wait")):
        rep.add("Is the CPU starving the GPU?", *parts, note=CPU_WAIT_NOTE, sid="cpu-wait")
