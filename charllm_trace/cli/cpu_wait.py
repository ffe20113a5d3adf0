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
    from charllm_trace.regress.cpu_wait_run import cpu_wait_rows

    out, notes = cpu_wait_rows(run, step_marker)
    if as_json:
        import orjson

        click.echo(orjson.dumps({"cpu_wait": out.to_dicts(), "notes": notes}).decode())
        return
    from charllm_trace.render.cpu_wait_table import render_cpu_wait
    from charllm_trace.render.fit import table_console

    render_cpu_wait(out, notes, table_console())
