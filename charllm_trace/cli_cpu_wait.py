"""``charllm-trace cpu-wait RUN``: per step, how the thread that launches each rank's work spent
it (running, waiting for a core, sleeping) and how much of the GPU's idle time it waited for a
core, from the CPU scheduler telemetry ``collect`` records (issue 24; docs/analyses.md, section 16)."""

from __future__ import annotations

import click


@click.command("cpu-wait")
@click.argument("run", type=click.Path())
@click.option(
    "--step-marker", default=None, metavar="NAME", help="Steps are the ranges of this name (see analyze)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def cpu_wait_cmd(run: str, step_marker: str | None, as_json: bool) -> None:
    """Is the CPU starving the GPU? Per rank and step: the launching thread's run, wait and other
    time, the GPU idle time and the thread's wait inside it, and cgroup throttling."""
    import os

    import polars as pl

    from charllm_trace.analysis.classify import classify
    from charllm_trace.analysis.cpu_wait import cpu_wait
    from charllm_trace.analysis.marker_steps import with_marker_steps
    from charllm_trace.analysis.step_windows import step_windows
    from charllm_trace.converters.cpu_sched import read_cpu_sched
    from charllm_trace.errors import InputError
    from charllm_trace.loader import load

    if not os.path.isdir(run):
        raise InputError(
            run, "not a run directory (cpu-wait reads the CPU scheduler telemetry collect wrote)"
        )
    threads, cgroup, notes = read_cpu_sched(run)
    if threads.height == 0:
        raise InputError(run, "no CPU scheduler telemetry (cpusched-<host>.csv): collect with --cpu-hz > 0")
    frames = []
    for rank, tr in sorted(load(run).traces.items()):
        if step_marker:
            tr, _ = with_marker_steps(tr, step_marker)
        classified = classify(tr.nodes)
        df, n = cpu_wait(rank, classified, step_windows(tr, classified), threads, cgroup)
        frames.append(df)
        notes.extend(n)
    out = pl.concat(frames)
    if as_json:
        import orjson

        click.echo(orjson.dumps({"cpu_wait": out.to_dicts(), "notes": notes}).decode())
        return
    from charllm_trace.render.cpu_wait_table import render_cpu_wait
    from charllm_trace.render.fit import table_console

    render_cpu_wait(out, notes, table_console())
