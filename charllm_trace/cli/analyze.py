"""``charllm-trace analyze`` and ``report``: the commands that analyse a run (through the results
cache, ``store/results_cache.py``) or draw saved results again (``store/results.py``). Registered on the
``charllm-trace`` group by ``cli/app.py``."""

from __future__ import annotations

import click

from charllm_trace.analysis.energy_methods import ENERGY_METHODS
from charllm_trace.cli.cache import allow_partial_option, json_flag, no_cache_option, wide_option
from charllm_trace.cli.results import (
    refuse_analysis_options,
    refuse_existing,
    refuse_existing_save,
    save_option,
    wrote,
)
from charllm_trace.cli.scale import scheduler_option
from charllm_trace.inputs.urls import is_url

# --- analyze (issue 5) -----------------------------------------------------


def _parse_ranks_option(text: str | None) -> list[int] | None:
    from charllm_trace.core.limits import parse_ranks

    return parse_ranks(text)


RANKS_HELP = "Ranks to analyse, e.g. 0-7,512,1016-1023 (default: all); only their files are read."
SAMPLE_HELP = (
    "Analyse N ranks evenly spaced over those present (with --ranks: over those), always the first "
    "and the last; only their files are read."
)

WHAT_IF_HELP = (
    "Predict step times under a change, e.g. gemm=2,comm=0.5,launch=0: classes gemm, attention, "
    "elementwise, kernel, comm, memcpy (alias memory), launch, cpu, idle (aliases gpu/compute, network, "
    "cpu_all) scaled by a factor > 0 (launch=0 allowed); tp/cp/dp/pp/ep=FACTOR scales one parallel "
    "dimension's communication; comm=100GB/s or dp=50GB/s re-times transfers at that bandwidth; "
    "cpu_op+=50us adds a fixed CPU cost to every operator. Figures labelled PREDICTED, with their range."
)


def _parse_what_if_option(text: str | None) -> dict[str, float] | None:
    """``--what-if`` text -> {key: value}; bad text is a UsageError (one line, exit 2), before
    anything is read (with ``--scheduler``, keys that need the whole run are refused too)."""
    if text is None:
        return None
    from charllm_trace import engine
    from charllm_trace.analysis.whatif_keys import parse_what_if, per_edge_keys
    from charllm_trace.core.errors import UsageError

    out = parse_what_if(text)
    if engine.scheduler() and per_edge_keys(out):
        raise UsageError(
            f"--what-if: {per_edge_keys(out)[0]} needs the whole run's collectives and operators: "
            "run it without --scheduler"
        )
    return out


@click.command("analyze")
@click.argument("path", type=click.Path())
@click.option("--per-step", is_flag=True, help="Also split every figure by ProfilerStep.")
@click.option("--step-marker", default=None, metavar="NAME",
              help="Steps are the ranges of this record_function name (a decode step, a batch, a forward), not ProfilerSteps.")  # fmt: skip
@click.option("--ranks", default=None, help=RANKS_HELP)
@click.option("--sample", type=int, default=None, metavar="N", help=SAMPLE_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "parquet"]), default="table",
              show_default=True, help="Output format.")  # fmt: skip
@json_flag
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Output file (json) or path stem (csv/parquet: one file per table).")  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@click.option("--hta-compat", is_flag=True,
              help="Holistic Trace Analysis' convention: drop kernels launched after the last ProfilerStep begins; µs rounding.")  # fmt: skip
@click.option(
    "--hta-keep-last-step",
    is_flag=True,
    help="With --hta-compat: keep the last step (HTA include_last_profiler_step).",
)
@click.option("--peak-gbps", type=float, default=None, help="Link peak (GB/s per direction) for utilisation.")
@click.option(
    "--parallel",
    default=None,
    help="Layout naming groups by dimension, e.g. tp=8,pp=4,dp=2,ep=1 (Megatron order).",
)
@click.option(
    "--simulate",
    is_flag=True,
    help="Rebuild a timeline for ETs without timestamps (figures labelled simulated).",
)
@click.option("--energy-method", type=click.Choice(ENERGY_METHODS), default="trapezoid", show_default=True,
              help="Power integration between telemetry samples; counter: the energy counter's own increments.")  # fmt: skip
@click.option("--what-if", "what_if", default=None, metavar="KEY=VALUE,...", help=WHAT_IF_HELP)
@click.option("--no-critical-path", is_flag=True, help="Skip the critical path through the execution graph.")
@wide_option
@click.option("--breakdown-top", type=click.IntRange(min=1), default=None, metavar="N",
              help="Time breakdown: keep the N kernels / ops with the most GPU time per rank and step, "
              "the rest summed in one row (default: all; tables show 10).")  # fmt: skip
@save_option
@no_cache_option
@allow_partial_option
@scheduler_option("analyze")
@click.pass_context
def analyze_cmd(
    ctx: click.Context,
    path: str,
    per_step: bool,
    step_marker: str | None,
    ranks: str | None,
    sample: int | None,
    fmt: str,
    output: str | None,
    force: bool,
    hta_compat: bool,
    hta_keep_last_step: bool,
    peak_gbps: float | None,
    parallel: str | None,
    simulate: bool,
    energy_method: str,
    what_if: str | None,
    no_critical_path: bool,
    wide: bool,
    breakdown_top: int | None,
    save: str | None,
) -> None:
    """Overlap, bandwidth per collective, energy per operator, power per step and the critical
    path of PATH (a .et, a directory of per-rank ETs, a collected run directory or a Kineto
    profile); with --what-if, predicted step times with durations scaled by class. PATH may also
    be a results file written by --save: its results are printed again, without the trace.

    A second analysis of the same input with the same options prints the results stored by the
    first (the results cache, docs/cache.md); --no-cache analyses again."""
    from charllm_trace.core.errors import UsageError
    from charllm_trace.store.results import is_results_file

    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet needs -o FILE")
    if fmt == "table" and output is not None:
        raise UsageError("-o needs --format json, csv or parquet")
    if output is not None and fmt == "json" and not is_url(output):
        refuse_existing(output, force)  # before the analysis, not after it (a dangling link too)
    if not is_url(path) and is_results_file(path):
        from charllm_trace.store.results import load_results

        refuse_analysis_options(ctx, path, ("path", "fmt", "as_json", "output", "force"))
        res = load_results(path)
    else:
        from charllm_trace.analysis.parallel import parse_parallel
        from charllm_trace.analysis.results import AnalyzeOptions
        from charllm_trace.store.results_cache import analyze_path

        if peak_gbps is not None and not peak_gbps > 0:
            raise UsageError("--peak-gbps must be > 0")
        opts = AnalyzeOptions(
            per_step=per_step,
            hta_compat=hta_compat or hta_keep_last_step,
            hta_keep_last_step=hta_keep_last_step,
            peak_gbps=peak_gbps,
            parallel=parse_parallel(parallel) if parallel else None,
            simulate=simulate,
            energy_method=energy_method,
            critical_path=not no_critical_path,
            what_if=_parse_what_if_option(what_if),
            breakdown_top=breakdown_top,
            step_marker=step_marker or None,
        )
        from charllm_trace.core.limits import parse_sample

        wanted, n_sample = _parse_ranks_option(ranks), parse_sample(sample)
        refuse_existing_save(save, force)
        from charllm_trace import engine
        from charllm_trace.cli.progress import input_progress

        with input_progress("reading"):  # with a scheduler, --save keeps no report views (docs/scale.md)
            got = analyze_path(
                path, opts, wanted, views=save is not None and not engine.scheduler(), sample=n_sample
            )
        res = got.analysis
        if save is not None:
            from charllm_trace.store.results import save_results

            wrote(save_results(res, save, views=got.views, force=force))
    if fmt == "table":
        from charllm_trace.render.tables import render_analysis

        render_analysis(res, wide=wide)
        return
    from charllm_trace.render import export

    if output is None and fmt == "json":  # a piece at a time (1,024 ranks: 150 MB)
        for piece in export.iter_json(res):
            click.echo(piece, nl=False)
        return
    if output is None:
        click.echo(export.render_stdout(res, fmt), nl=False)
        return
    from pathlib import Path

    from charllm_trace.inputs.localize import url_output

    with url_output(output) as out:  # an fsspec URL: written here, uploaded whole
        written = export.write(res, fmt, out, force=force)
    for p in written:
        shown = output.rstrip("/").rsplit("/", 1)[0] + "/" + Path(p).name if out != output else p
        click.echo(f"wrote {shown}", err=True)


@click.command("report")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(), help="The HTML file to write.")
@click.option("--peak-gbps", type=float, default=None, help="Override the link peak (GB/s per direction).")
@click.option("--title", default=None, help="Title of the page.")
@click.option(
    "--simulate",
    is_flag=True,
    help="Rebuild a timeline for ETs without timestamps (figures labelled simulated).",
)
@click.option("--what-if", "what_if", default=None, metavar="KEY=VALUE,...", help=WHAT_IF_HELP)
@click.option("--ranks", default=None, help=RANKS_HELP.replace("analyse", "draw"))
@click.option("--sample", type=int, default=None, metavar="N", help=SAMPLE_HELP.replace("Analyse", "Draw"))
@click.option("--force", is_flag=True, help="Overwrite OUTPUT (and the --save file) if it exists.")
@save_option
@no_cache_option
@allow_partial_option
@scheduler_option("report")
@click.pass_context
def report_cmd(
    ctx: click.Context, run: str, output: str, peak_gbps: float | None, title: str | None, simulate: bool,
    what_if: str | None, ranks: str | None, sample: int | None, force: bool, save: str | None,
) -> None:  # fmt: skip
    """Write one self-contained HTML page (opens offline) with the run's timeline and power,
    overlap per step, bus bandwidth vs message size, energy by operator, power /
    temperature / SM clock with throttle periods, the critical path per step, and (with
    --what-if) the predicted step times. RUN may also be a results file written by --save (of
    report or analyze): the page is drawn again without the trace."""
    from pathlib import Path

    from charllm_trace.core.errors import UsageError
    from charllm_trace.render.report import render_report, report_data_from
    from charllm_trace.render.tables import cli_hint
    from charllm_trace.store.results import is_results_file, read_results

    refuse_existing(output, force)
    if not is_url(run) and is_results_file(run):
        refuse_analysis_options(ctx, run, ("run", "output", "title", "force"))
        saved = read_results(run)
        an, views = saved.analysis, saved.views()
    else:
        from charllm_trace.analysis.results import AnalyzeOptions
        from charllm_trace.store.results_cache import analyze_path

        if peak_gbps is not None and not peak_gbps > 0:
            raise UsageError("--peak-gbps must be > 0")
        from charllm_trace.core.limits import parse_sample

        factors = _parse_what_if_option(what_if)
        wanted, n_sample = _parse_ranks_option(ranks), parse_sample(sample)
        refuse_existing_save(save, force)
        opts = AnalyzeOptions(per_step=True, peak_gbps=peak_gbps, simulate=simulate, what_if=factors)
        from charllm_trace.cli.progress import input_progress

        with input_progress("reading"):
            got = analyze_path(run, opts, wanted, views=True, sample=n_sample)
        an, views = got.analysis, got.views
        assert views is not None
        if save is not None:
            from charllm_trace.store.results import save_results

            wrote(save_results(an, save, views=views, force=force))
    name = Path(views.source).name if views.source else Path(run).name
    data = report_data_from(views, an, title=title or f"charllm-trace report: {name}")
    # the page is the CLI's output: its notes name the CLI's flags where one helps
    data.skipped = {k: cli_hint(v) for k, v in data.skipped.items()}
    data.notes = [cli_hint(n) for n in data.notes]
    data.critical_notes = [cli_hint(n) for n in data.critical_notes]
    data.what_if_notes = [cli_hint(n) for n in data.what_if_notes]
    from charllm_trace.inputs.localize import url_output

    with url_output(output) as out:  # an fsspec URL: written here, uploaded whole
        Path(out).write_text(render_report(data), encoding="utf-8")
    by_reason: dict[str, list[str]] = {}  # one reason, said once, for every section it holds for
    for k, v in data.skipped.items():
        by_reason.setdefault(v, []).append(k.replace("_", " "))
    skipped = "; ".join(f"{', '.join(ks)}: {v}" for v, ks in by_reason.items())
    click.echo(f"wrote {output}" + (f" (not drawn: {skipped})" if skipped else ""))
