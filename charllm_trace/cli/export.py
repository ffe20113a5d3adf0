"""``charllm-trace export`` (issue 6): the ``export`` group with ``perfetto`` (here) and
``astra-sim`` (cli/astra.py), registered in cli/app.py.

The work is :func:`charllm_trace.exports.perfetto.write_chrome_trace` and
:func:`charllm_trace.exports.astra_sim.export_astra_sim`; the library is imported when a command
runs, so that ``--help`` loads no polars (tests/test_alloc.py).
"""

from __future__ import annotations

from typing import Any

import click

from charllm_trace.cli.astra import astra_sim_command
from charllm_trace.cli.cache import allow_partial_option, no_cache_option
from charllm_trace.cli.results import refuse_existing
from charllm_trace.cli.scale import scheduler_option
from charllm_trace.core.errors import InputError


@click.group("export")
def export_group() -> None:
    """Export a run to other tools' formats."""


export_group.add_command(
    scheduler_option("astra-sim")(allow_partial_option(no_cache_option(astra_sim_command)))
)


@export_group.command("perfetto")
@click.argument("run", type=click.Path())
@click.option(
    "-o", "--output", required=True, type=click.Path(), help="Chrome-trace JSON (.json or .json.gz)."
)
@click.option("--no-flows", is_flag=True, help="Leave out the launch arrows from CPU ops to GPU kernels.")
@click.option(
    "--simulate", is_flag=True, help="Ranks without timestamps: draw a timeline rebuilt from dependencies."
)
@click.option(
    "--no-critical-path", is_flag=True, help="Leave out the 'critical path (rank N)' track of each rank."
)
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@no_cache_option
@allow_partial_option
@scheduler_option("perfetto")
def export_perfetto(
    run: str, output: str, no_flows: bool, simulate: bool, no_critical_path: bool, force: bool
) -> None:
    """Write RUN as a Chrome-trace JSON for the Perfetto UI (ui.perfetto.dev): one process per
    rank, one track per CPU thread and GPU stream, power/temperature/clock counters per GPU,
    and each rank's critical path (whole trace) on a track of its own."""
    from charllm_trace.core.model import Run
    from charllm_trace.exports.perfetto import write_chrome_trace
    from charllm_trace.inputs import loader

    refuse_existing(output, force)
    r = loader.load(run)
    untimed = [k for k, t in r.traces.items() if not t.meta.has_timestamps]
    if untimed and not simulate and len(untimed) == len(r.traces):
        raise InputError(
            r.source or run,
            "no timestamps in any rank (a Chakra ET from Chakra's converter, or a host execution trace "
            "alone): nothing to place on a timeline; rerun with --simulate to draw the timeline rebuilt "
            "from the dependencies (simulated times, marked as such)",
        )
    if simulate:
        from charllm_trace.analysis import simulate as sim

        traces = {k: (t if t.meta.has_timestamps else sim(t)) for k, t in r.traces.items()}
        r = Run(traces=traces, manifest=r.manifest, source=r.source)
    cp, why = (None, None) if no_critical_path else _critical_path_for_export(r)
    from charllm_trace.analysis.api import export_overlays
    from charllm_trace.inputs.localize import url_output

    with url_output(output) as out:  # an fsspec URL: written here, uploaded whole
        stats = write_chrome_trace(r, out, flows=not no_flows, critical_path=cp, **export_overlays(r))
    click.echo(
        f"wrote {output}: {stats.ranks} ranks, {stats.tracks} tracks, {stats.slices} slices, "
        f"{stats.counter_samples} counter samples, {stats.flows} launch flows"
        + (f", {stats.critical_path_segments} critical-path segments" if cp is not None else "")
        + (f" ({stats.skipped_untimed} nodes without a start time left out)" if stats.skipped_untimed else "")
    )
    if untimed and not simulate:
        click.echo(
            f"ranks {untimed} have no timestamps and are left out: --simulate draws them on a rebuilt timeline"
        )
    if stats.overlap_slices:
        n = stats.overlap_slices
        click.echo(
            f"{n} {'slice partially overlaps another on its' if n == 1 else 'slices partially overlap others on their'}"
            " thread or stream: drawn, with exact times, on the '... (overlaps)' track beside it"
        )
    if stats.flows_backwards or stats.flows_unbound:
        click.echo(
            f"launch flows left out: {stats.flows_backwards} where the GPU op begins before its launch call "
            f"(clocks disagree), {stats.flows_unbound} where another slice begins at the same time on the "
            "call's or the op's track (Perfetto would bind the arrow to it)"
        )
    if why:
        click.echo(f"critical path: not drawn: {why}")


def _critical_path_for_export(run: Any) -> tuple[Any, str | None]:
    """The run's critical paths for the Perfetto track, or (None, why not)."""
    from charllm_trace.analysis.critical import critical_path
    from charllm_trace.core.dag import CycleError

    untimed = [k for k, t in run.traces.items() if not t.meta.has_timestamps]
    if untimed:
        return None, f"ranks {untimed} have no timestamps (rerun with --simulate)"
    try:
        return critical_path(run), None
    except CycleError as exc:
        return None, f"the execution graph has dependency cycles ({exc.problem})"
