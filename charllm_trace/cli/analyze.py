"""``charllm-trace analyze`` and ``report``: the commands that analyse a run or draw saved results
again, both through the service (``service.py``: input, cache, where it runs). Registered on the
``charllm-trace`` group by ``cli/app.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from charllm_trace.analysis.energy_methods import ENERGY_METHODS
from charllm_trace.cli.cache import allow_partial_option, json_flag, no_cache_option, wide_option
from charllm_trace.cli.options import AnalysisArgs, analysed, analysis_args
from charllm_trace.cli.results import (
    refuse_analysis_options,
    refuse_existing,
    refuse_existing_save,
    save_option,
    wrote,
)
from charllm_trace.cli.scale import scheduler_option
from charllm_trace.engine import Cluster
from charllm_trace.inputs.urls import is_url

if TYPE_CHECKING:
    from charllm_trace.analysis.results import RunAnalysis

# --- analyze (issue 5) -----------------------------------------------------


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


#: the largest printed output the output cache keeps (bytes)
OUTPUT_CACHE_MAX = 64 << 20


def _output_key(
    ctx: click.Context, path: str, fmt: str, output: str | None, save: str | None, cluster: Cluster | None
) -> str | None:
    """The output cache's key of this command (None: its output is not kept: not JSON or a table
    to stdout, a --save, a URL, a scheduler, the caches turned off, or not called through the
    group, whose command line is the key)."""
    from charllm_trace.store import output_cache

    argv = ctx.meta.get("argv")
    if fmt not in output_cache.FORMATS or output is not None or save is not None or argv is None:
        return None
    if is_url(path) or cluster is not None or not output_cache.enabled():
        return None
    return output_cache.output_key(argv)


def _print_cached_output(path: str, key: str) -> bool:
    """Print the stored output of ``key`` (True), with the note a results-cache hit gives."""
    from charllm_trace.store import output_cache

    got = output_cache.lookup(key)
    if got is None:
        return False
    from charllm_trace.collectors.run_checks import note_on_results_hit

    note_on_results_hit(path)
    click.echo(got[1], nl=False)
    return True


class _Kept:
    """What a command prints, kept for the output cache (not beyond ``OUTPUT_CACHE_MAX``)."""

    def __init__(self, key: str | None, path: str, fmt: str) -> None:
        self.key, self.path, self.fmt = key, path, fmt
        self.parts: list[bytes] | None = [] if key is not None else None
        self.size = 0

    def add(self, piece: bytes) -> None:
        if self.parts is None:
            return
        self.size += len(piece)
        if self.size > OUTPUT_CACHE_MAX:
            self.parts = None  # a huge output is not kept
        else:
            self.parts.append(piece)

    def store(self) -> None:
        if self.parts is None or self.key is None:
            return
        from charllm_trace.store import output_cache

        cond = output_cache.conditions(self.path, self.fmt)
        if cond is not None:
            output_cache.store(self.key, cond, b"".join(self.parts))


class _Tee:
    """stdout for rich, keeping what is written: rich sees stdout itself (terminal or not, its size,
    encoding, colour: the same table) through the attributes passed on."""

    def __init__(self, kept: _Kept) -> None:
        import sys

        self._out, self._kept = sys.stdout, kept

    def write(self, text: str) -> int:
        self._kept.add(text.encode(self._out.encoding or "utf-8", errors="replace"))
        return self._out.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._out, name)


def _print_json(res: RunAnalysis, kept: _Kept) -> None:
    """Print ``res`` as JSON a piece at a time (1,024 ranks: 150 MB), keeping the bytes for the
    output cache."""
    from charllm_trace.render import export

    for piece in export.iter_json(res):
        click.echo(piece, nl=False)
        kept.add(piece)
    kept.store()


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
@analysis_args
@click.pass_context
def analyze_cmd(
    ctx: click.Context,
    path: str,
    fmt: str,
    output: str | None,
    force: bool,
    wide: bool,
    save: str | None,
    args: AnalysisArgs,
    cluster: Cluster | None,
) -> None:
    """Overlap, bandwidth per collective, energy per operator, power per step and the critical
    path of PATH (a .et, a directory of per-rank ETs, a collected run directory or a Kineto
    profile); with --what-if, predicted step times with durations scaled by class. PATH may also
    be a results file written by --save: its results are printed again, without the trace.

    A second analysis of the same input with the same options prints the results stored by the
    first (the results cache, docs/cache.md); --no-cache analyses again."""
    okey = _output_key(ctx, path, fmt, output, save, cluster)
    if okey is not None and _print_cached_output(path, okey):
        return  # printed what the same analysis printed before (store/output_cache.py)
    from charllm_trace.core.errors import UsageError

    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet needs -o FILE")
    if fmt == "table" and output is not None:
        raise UsageError("-o needs --format json, csv or parquet")
    if output is not None and fmt == "json" and not is_url(output):
        refuse_existing(output, force)  # before the analysis, not after it (a dangling link too)
    spill = _spill_place(output, fmt, save, cluster)
    try:
        res = _results(ctx, path, args, save, force, cluster, spill)
        _emit(res, fmt, output, force, wide, _Kept(okey, path, fmt))
    finally:
        if spill is not None:
            from charllm_trace.engine.spill import remove

            remove(spill)


def _spill_place(output: str | None, fmt: str, save: str | None, cluster: Cluster | None) -> str | None:
    """Where the workers write their ranks' own rows (``engine/spill.py``): beside ``-o``, when a
    scheduler analyses and a machine format is written to a file (not with --save, which keeps
    the results whole)."""
    if cluster is None or output is None or fmt == "table" or save is not None:
        return None
    import uuid

    base, _, name = output.rstrip("/").rpartition("/")
    return f"{base or '.'}/.{name}.rows-{uuid.uuid4().hex[:12]}"


def _results(
    ctx: click.Context,
    path: str,
    args: AnalysisArgs,
    save: str | None,
    force: bool,
    cluster: Cluster | None,
    spill: str | None = None,
) -> RunAnalysis:
    """``analyze``'s results: a results file's as saved, else through the service (and saved)."""
    from charllm_trace.service import is_saved  # here: a printed-output hit imports no polars

    if is_saved(path):
        refuse_analysis_options(ctx, path, ("path", "fmt", "as_json", "output", "force"))
        return analysed(path).results()
    opts, req = args.options(cluster), args.request(views=save is not None and cluster is None, spill=spill)
    refuse_existing_save(save, force)  # with a scheduler, --save keeps no report views (docs/scale.md)
    got = analysed(path, opts, req, cluster)
    if save is not None:
        from charllm_trace.store.results import save_results

        wrote(save_results(got.results(), save, views=got.views, force=force))
    return got.results()


def _emit(res: RunAnalysis, fmt: str, output: str | None, force: bool, wide: bool, kept: _Kept) -> None:
    """Print or write ``res`` in ``fmt``."""
    if fmt == "table":
        from charllm_trace.render.fit import table_console
        from charllm_trace.render.tables import render_analysis

        render_analysis(res, table_console(wide, file=_Tee(kept)) if kept.key else None, wide=wide)
        kept.store()
        return
    from charllm_trace.render import export

    if output is None and fmt == "json":
        _print_json(res, kept)
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
@analysis_args
@click.pass_context
def report_cmd(
    ctx: click.Context, run: str, output: str, title: str | None, force: bool, save: str | None,
    args: AnalysisArgs,
) -> None:  # fmt: skip
    """Write one self-contained HTML page (opens offline) with the run's timeline and power,
    overlap per step, bus bandwidth vs message size, energy by operator, power /
    temperature / SM clock with throttle periods, the critical path per step, and (with
    --what-if) the predicted step times. RUN may also be a results file written by --save (of
    report or analyze): the page is drawn again without the trace."""
    from pathlib import Path

    from charllm_trace.render.report import render_report, report_data_from
    from charllm_trace.render.tables import cli_hint

    refuse_existing(output, force)
    from charllm_trace.service import is_saved  # here: a printed-output hit imports no polars

    if is_saved(run):
        refuse_analysis_options(ctx, run, ("run", "output", "title", "force"))
        got = analysed(run, request=args.request(views=True))
    else:
        opts, req = args.options(per_step=True), args.request(views=True)
        refuse_existing_save(save, force)
        got = analysed(run, opts, req)
    an, views = got.results(), got.views
    assert views is not None
    if save is not None and not got.saved:
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
