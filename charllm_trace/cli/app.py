"""The ``charllm-trace`` command: a thin click layer over the library.

Commands parse options, call one library function, and hand the result to a
renderer. Exit codes: 0 success, 1 a ``check`` found a regression, 2 bad input
(one line on stderr naming the file and the problem; ``--debug`` adds the
traceback), 3 an internal error or a broken install (a compiled helper missing: one line naming
it and the fix).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from charllm_trace.cli.analyze import analyze_cmd, report_cmd
from charllm_trace.cli.cache import allow_partial_option, cache_group, no_cache_option, wide_option
from charllm_trace.cli.collect import iteration_args, iteration_options
from charllm_trace.cli.compare import compare_cmd
from charllm_trace.cli.cpu_wait import cpu_wait_cmd
from charllm_trace.cli.regress import (  # EXIT_REGRESSION: listed with the other exit codes; noqa: F401
    baseline_cmd,
    check_cmd,
    diff_cmd,
)
from charllm_trace.cli.results import refuse_existing
from charllm_trace.cli.scale import scheduler_option
from charllm_trace.cli.telemetry import telemetry_group
from charllm_trace.core.errors import InputError, debug_first, print_traceback
from charllm_trace.core.native_libs import NativeModuleMissing
from charllm_trace.engine import Cluster

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class _Group(click.Group):
    """Turns library exceptions into one-line messages and exit codes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, debug_first(args, self.commands))  # --debug after it too

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except InputError as exc:
            print_traceback(debug)
            click.echo(f"error: {exc.one_line()}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except NativeModuleMissing as exc:  # a broken install, not the user's input
            print_traceback(debug)
            click.echo(f"error: {' '.join(str(exc).split())}", err=True)
            ctx.exit(EXIT_INTERNAL)
        except Exception as exc:  # a bug: still one line unless --debug
            print_traceback(debug)
            first = " ".join(str(exc).split())[:300]
            click.echo(
                f"internal error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="charllm-trace")
def main(debug: bool) -> None:
    """Power, performance and thermal analysis of distributed training traces."""
    # Process-wide tuning is the program's choice, not the library's: polars' allocator returns
    # freed memory sooner, and the C heap is trimmed after reads and builds (lower peak RSS;
    # charllm_trace/core/alloc.py). Nothing above has imported polars yet; a subcommand's own
    # imports do (when they do: a repeated analysis printed from the cache imports no polars).
    from charllm_trace.core.alloc import trim_heap_after_reads, tune_polars_allocator_on_import

    tune_polars_allocator_on_import()
    trim_heap_after_reads()


# Each command lives in its own section below; keep them thin.

# --- info (issue 2) --------------------------------------------------------


@main.command("info")
@click.argument("path", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times in ns, bytes in bytes).")
@click.option("--no-cache", is_flag=True, help="Decode the files again instead of using the cache.")
@allow_partial_option
@wide_option
@scheduler_option("info")
def info_cmd(path: str, as_json: bool, no_cache: bool, wide: bool, cluster: Cluster | None) -> None:
    """Summarise an ET file or a directory of per-rank ETs (or any run charllm-trace reads):
    ranks, node counts by type, time span, collectives and bytes, process groups, devices, telemetry."""
    if cluster is not None:  # each rank summarised on a worker (docs/scale.md)
        from charllm_trace.engine.driver import info_distributed

        summary = info_distributed(path, cluster=cluster, cache=not no_cache)
    else:
        from charllm_trace.et.summary import run_summary
        from charllm_trace.inputs.loader import load

        summary = run_summary(load(path, cache=not no_cache))
    if as_json:
        from charllm_trace.render.info import info_json

        click.echo(info_json(summary))
    else:
        from charllm_trace.render.fit import table_console
        from charllm_trace.render.info import render_info

        render_info(summary, table_console(wide))


# --- convert (issue 3) -----------------------------------------------------


@main.command("convert")
@click.argument("path", type=click.Path())
@click.option("-o", "--output", required=True, help="Output directory for rank-<N>.et files.")
@click.option(
    "--host-et", type=click.Path(), default=None, help="With a single Kineto file: its host execution trace."
)
@click.option(
    "--workers", type=int, default=None, help="Worker processes (default: one per CPU, at most one per rank)."
)
@click.option("--gz", is_flag=True, help="Write gzip-compressed rank-<N>.et.gz files.")
@click.option("--force", is_flag=True, help="Replace existing rank-<N>.et files in the output directory.")
@allow_partial_option
@scheduler_option("convert")
def convert_cmd(
    path: str, output: str, host_et: str | None, workers: int | None, gz: bool, force: bool,
    cluster: Cluster | None,
) -> None:  # fmt: skip
    """Convert a run directory, or one Kineto profile / host ET, to one Chakra ET per rank.

    \b
    charllm-trace convert RUN_DIR -o et/
    charllm-trace convert kineto.json.gz --host-et host_et.json.gz -o et/
    """
    from charllm_trace.cli.convert import convert_lines

    for line in convert_lines(path, output, host_et, workers, gz=gz, force=force, cluster=cluster):
        click.echo(line)


# --- collect (issue 4) -----------------------------------------------------


@main.command(
    "collect",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "-o", "--output", "run_dir", default=None, help="Run directory (default: charllm-run-<date>-<time>)."
)
@click.option(
    "--steps",
    default="1-2",
    show_default=True,
    help="Training steps to trace, N or A-B (0-based, see docs/collect.md).",
)
@click.option(
    "--ranks", default="all", show_default=True, help="Ranks to trace: all, or a list like 0,8,16-18."
)
@click.option(
    "--telemetry-hz",
    type=float,
    default=100.0,
    show_default=True,
    help="GPU telemetry rate per node; 0 turns it off.",
)
@click.option(
    "--telemetry-source",
    default="auto",
    show_default=True,
    help="auto, nvml, amdsmi, none, or replay:PATH (a recorded stream).",
)
@click.option("--parallel", default=None, help="Parallel layout for the manifest, e.g. tp=8,pp=4,dp=2,ep=1.")
@click.option("--workload", default=None,
              help="What is trained, for the manifest (compare lists it), e.g. model=llama-7b,mbs=1,gbs=256,seq=4096.")  # fmt: skip
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the Kineto profile (larger files).")
@click.option("--force", is_flag=True, help="Replace the trace files of an existing run directory.")
@iteration_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def collect_cmd(
    run_dir: str | None,
    steps: str,
    step_marker: str | None,
    window: str | None,
    cpu_hz: float,
    cpus: str | None,
    ranks: str,
    telemetry_hz: float,
    telemetry_source: str,
    parallel: str | None,
    workload: str | None,
    with_stack: bool,
    force: bool,
    command: tuple[str, ...],
) -> None:
    """Run a training COMMAND (after --) and collect traces of chosen steps and GPU telemetry.

    \b
    charllm-trace collect -o run --steps 10-12 -- torchrun --nproc_per_node 8 train.py ...
    Exits with the training command's exit code.
    """
    from charllm_trace.collectors.launcher import (
        collect,
        parse_parallel,
        parse_ranks,
        parse_workload,
    )

    result = collect(
        list(command),
        run_dir,
        **iteration_args(step_marker, window, steps, cpu_hz, cpus),
        ranks=parse_ranks(ranks),
        telemetry_hz=telemetry_hz,
        telemetry_source=telemetry_source,
        parallel=parse_parallel(parallel),
        workload=parse_workload(workload),
        force=force,
        with_stack=with_stack,
        log=lambda msg: click.echo(f"charllm-trace: {msg}", err=True),
    )
    click.echo(f"charllm-trace: run directory {result.run_dir} (exit code {result.exit_code})", err=True)
    sys.exit(result.exit_code)


# --- baseline / check / diff / report / export / sanitize (issue 6) --------

# baseline / check / diff (issue 6): cli/regress.py

# export / sanitize / report (issue 6) ...................................


@main.group("export")
def export_group() -> None:
    """Export a run to other tools' formats."""


from charllm_trace.cli.astra import astra_sim_command  # noqa: E402

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


@main.command("sanitize")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(), help="Where to write the clean copy.")
@click.option("--redact", multiple=True, metavar="WORD", help="Also replace WORD everywhere (repeatable).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
def sanitize_cmd(run: str, output: str, redact: tuple[str, ...], force: bool) -> None:
    """Write a copy of RUN without host names, user names, file paths, Python stack frames
    and environment, for sharing. RUN itself is never modified (see docs/sharing.md)."""
    from charllm_trace.sanitize import sanitize_run

    r = sanitize_run(run, output, force=force, redact=redact)
    click.echo(
        f"wrote {output}: {len(r.written)} files; {r.hosts} host names pseudonymised, {r.users} user names, "
        f"{r.paths_replaced} paths, {r.env_dropped} environment blocks and {r.keys_dropped} other private "
        f"fields removed; {r.ids} process/thread ids remapped; {r.python_frames_cleaned} Python stack "
        "events kept without their file paths"
    )
    if r.left_out:
        click.echo(f"left out (unknown file type, not copied): {', '.join(r.left_out)}")


# end export / sanitize / report (issue 6) ...............................


main.add_command(analyze_cmd)
main.add_command(baseline_cmd)
main.add_command(check_cmd)
main.add_command(diff_cmd)
main.add_command(report_cmd)
main.add_command(cache_group)
main.add_command(telemetry_group)
main.add_command(cpu_wait_cmd)
main.add_command(compare_cmd)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
