"""The HTML report's "Is the CPU starving the GPU?" section: per step, the launching thread's run,
wait (runnable, no core) and other time and its wait during the GPU's idle time; the longest GPU
idle intervals blamed on the host; per phase; the cgroup quota beside the throttling. Drawing only:
every number comes from :class:`charllm_trace.analysis.cpu_wait_results.CpuWaitResult`."""

from __future__ import annotations

from typing import Any

from charllm_trace.analysis.cpu_wait_results import CpuWaitResult

CPU_WAIT_NOTE = (
    "the launching thread = the thread of the rank with the most kernel-launch calls; run = on a CPU, wait = "
    "runnable but waiting for a core, other = sleeping or blocked, from its schedstat samples (interpolated); "
    "GPU idle blamed on the host = no GPU activity until an operator whose launch call began after the idle did "
    "(docs/analyses.md, CPU scheduler telemetry)"
)
TOP_IDLE = 16


def cpu_wait_parts(cw: CpuWaitResult | None) -> list[str]:
    """The section's tables (nothing without CPU scheduler telemetry)."""
    from charllm_trace.render import html as H
    from charllm_trace.render.report_sections import ms, notes_list, pct

    if cw is None or (cw.steps.height == 0 and cw.idle.height == 0):
        return []
    steps = [
        [r["rank"], r["step"], r["tid"], ms(r["window_ns"]), ms(r["run_ns"]), ms(r["wait_ns"]), ms(r["other_ns"]),
         pct(r["gpu_idle_pct"]), ms(r["idle_wait_ns"]), ms(r["throttled_ns"])]
        for r in cw.steps.iter_rows(named=True)
    ]  # fmt: skip
    head = ["rank", "step", "tid", "window ms", "run ms", "wait ms", "other ms", "GPU idle %", "wait in idle ms",
            "throttled ms"]  # fmt: skip
    idle = [
        [r["rank"], "" if r["step"] is None else r["step"], r["phase"] or "", ms(r["dur_ns"]), ms(r["late_ns"]),
         ms(r["run_ns"]), ms(r["wait_ns"]), ms(r["other_ns"]), ms(r["throttled_ns"]), r["call_name"] or ""]
        for r in cw.idle.sort("dur_ns", descending=True).head(TOP_IDLE).iter_rows(named=True)
    ]  # fmt: skip
    idle_head = ["rank", "step", "phase", "idle ms", "late ms", "run ms", "wait ms", "other ms", "throttled ms",
                 "launch call"]  # fmt: skip
    phases = [
        [r["rank"], "all" if r["step"] is None else r["step"], r["phase"], r["n"], ms(r["cpu_ns"]), ms(r["run_ns"]),
         ms(r["wait_ns"]), pct(r["wait_pct"]), ms(r["host_idle_ns"]), ms(r["host_idle_wait_ns"])]
        for r in cw.phases.iter_rows(named=True)
    ]  # fmt: skip
    ph_head = ["rank", "step", "phase", "ranges", "CPU ms", "run ms", "wait ms", "wait %", "host-blamed idle ms",
               "wait in it ms"]  # fmt: skip
    out = [H.table(head, steps, scroll=True)]
    if cw.quota is not None:
        q = cw.quota
        out.append(f"<p>cgroup CPU quota (cpu.max): {q['cores']:.2f} cores ({int(q['quota_us'])} µs per "
                   f"{int(q['period_us'])} µs)</p>")  # fmt: skip
    if idle:
        out.append(f"<p>GPU idle blamed on the host: {cw.idle.height} intervals; the longest {len(idle)}</p>")
        out.append(H.table(idle_head, idle, scroll=True))
    if phases:
        out.append(H.table(ph_head, phases, scroll=True))
    return [*out, notes_list(cw.notes)]


def cpu_wait_section(data: Any, rep: Any) -> None:
    """The report's section, only for a run with CPU scheduler telemetry (the analysis registry's
    HTML renderer of ``cpu_wait``)."""
    if parts := cpu_wait_parts(data.results.get("cpu_wait")):
        rep.add("Is the CPU starving the GPU?", *parts, note=CPU_WAIT_NOTE, sid="cpu-wait")
