"""The CPU-wait rows of a run directory (issue 24): every rank's per-step figures from
:func:`charllm_trace.analysis.cpu_wait.cpu_wait` over the scheduler telemetry ``collect`` wrote.
Reads the files; ``cpu-wait`` and ``compare`` show what it returns."""

from __future__ import annotations

import os

import polars as pl

from charllm_trace.core.errors import InputError


def cpu_wait_rows(run: str, step_marker: str | None = None) -> tuple[pl.DataFrame, list[str]]:
    """Per rank and step (CPU_WAIT_SCHEMA) and notes; steps are ``step_marker``'s ranges when given.
    InputError for a path that is no run directory or has no scheduler telemetry."""
    from charllm_trace.analysis.cpu_wait import cgroup_quota, cpu_wait, untraced_note
    from charllm_trace.analysis.marker_steps import with_marker_steps
    from charllm_trace.analysis.step_windows import step_windows
    from charllm_trace.converters.cpu_sched import read_cpu_sched
    from charllm_trace.core.classify import classify
    from charllm_trace.inputs.loader import load

    if not os.path.isdir(run):
        raise InputError(
            run, "not a run directory (cpu-wait reads the CPU scheduler telemetry collect wrote)"
        )
    threads, cgroup, notes = read_cpu_sched(run)
    if threads.height == 0:
        raise InputError(run, "no CPU scheduler telemetry (cpusched-<host>.csv): collect with --cpu-hz > 0")
    frames = []
    traces = load(run).traces
    notes.extend(untraced_note(threads, [traces[r].nodes for r in sorted(traces)]))
    for rank, tr in sorted(traces.items()):
        if step_marker:
            tr, _ = with_marker_steps(tr, step_marker)
        classified = classify(tr.nodes)
        df, n = cpu_wait(rank, classified, step_windows(tr, classified), threads, cgroup)
        frames.append(df)
        notes.extend(n)
    if (q := cgroup_quota(cgroup)) is not None:  # the quota, beside the throttling figures
        notes.append(
            f"cgroup CPU quota (cpu.max): {q['cores']:.2f} cores ({q['quota_us']} µs per {q['period_us']} µs)"
        )
    return pl.concat(frames), notes


def cpu_columns(run: str) -> dict[str, object]:
    """``compare``'s CPU-allocation columns of a run directory (``regress.cpu_sweep``): the cores
    per rank ``collect --cpus`` recorded, and the CPU wait figures where scheduler telemetry is
    there (steps by the ``--step-marker`` the run was collected with). Empty for anything else."""
    from charllm_trace.collectors.manifest import read_manifest
    from charllm_trace.regress.cpu_sweep import cpu_figures

    if not os.path.isdir(run):
        return {}
    try:
        m = read_manifest(run)
    except InputError:
        m = {}
    marker = m.get("step_marker") if isinstance(m.get("step_marker"), str) else None
    cpus = m.get("cpus") if isinstance(m.get("cpus"), dict) else {}
    out: dict[str, object] = {"cpus_per_rank": cpus.get("per_rank")}
    try:
        rows, _ = cpu_wait_rows(run, marker)
    except InputError:
        return out
    return {**out, **cpu_figures(rows, marker is not None)}
