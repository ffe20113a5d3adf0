"""``charllm-trace baseline``, ``check`` and ``diff`` (issue 6): each analyses its run(s) through
the service (``cli_service.regress_analysed``: per-step rows, the results cache, ``--scheduler``
for ``check``) and hands the results to ``regress/``'s pure functions and renderers. Registered on
the ``charllm-trace`` group by ``cli.py``."""

from __future__ import annotations

import sys

import click

from charllm_trace.cli.cache import allow_partial_option, json_flag, no_cache_option, wide_option
from charllm_trace.cli.options import regress_analysed
from charllm_trace.cli.results import refuse_existing
from charllm_trace.cli.scale import scheduler_option
from charllm_trace.engine import Cluster

#: the exit status of a ``check`` that found a regression
EXIT_REGRESSION = 1


@click.command("baseline")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(), help="Baseline JSON to write.")
@click.option(
    "--hta-compat", is_flag=True, help="Drop kernels launched after the last ProfilerStep begins (HTA)."
)
@click.option("--simulate", is_flag=True, help="Rebuild a timeline for ETs without timestamps.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@no_cache_option
@allow_partial_option
@scheduler_option("baseline")
def baseline_cmd(run: str, output: str, hta_compat: bool, simulate: bool, force: bool) -> None:
    """Record RUN's headline figures (overlap, exposed communication, bus bandwidth,
    energy, power, throttling) in a baseline file for `check`."""

    from charllm_trace.analysis.results import AnalyzeOptions
    from charllm_trace.inputs.localize import url_output
    from charllm_trace.regress.api import baseline_of
    from charllm_trace.regress.baseline import write_baseline
    from charllm_trace.render.tables import cli_hint

    refuse_existing(output, force)  # before the analysis, not after it
    got = regress_analysed(run, AnalyzeOptions(hta_compat=hta_compat, simulate=simulate), run=True)
    b = baseline_of(run, got.loaded(), got.results())
    with url_output(output) as out:  # an fsspec URL: written here, uploaded whole
        write_baseline(b, out, force=force)
    counts: dict[str, int] = {}
    for m in b.metrics:
        counts[m.cls] = counts.get(m.cls, 0) + 1
    detail = ", ".join(f"{n} {c}" for c, n in counts.items())
    skipped = b.input.get("skipped") or {}
    click.echo(f"wrote {output}: {len(b.metrics)} metrics ({detail})")
    for name, why in skipped.items():
        click.echo(f"note: {name} not recorded: {cli_hint(why)}")


@click.command("check")
@click.argument("run", type=click.Path())
@click.option("--baseline", "baseline_path", required=True, type=click.Path(), help="Baseline JSON.")
@click.option(
    "--tolerance",
    default=None,
    help="CLASS=BOUND,... e.g. overlap=2pp,busbw=5%,energy=5%,throttle=5%+100ms "
    "(classes: overlap, exposed_comm, busbw, energy, power, throttle).",
)
@click.option("--allow-missing", is_flag=True, help="Do not fail on baseline metrics the run no longer has.")
@click.option("--all", "show_all", is_flag=True, help="List every metric, not only the failures.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@json_flag
@no_cache_option
@allow_partial_option
@wide_option
@scheduler_option("check")
def check_cmd(
    run: str, baseline_path: str, tolerance: str | None, allow_missing: bool, show_all: bool, fmt: str,
    wide: bool, cluster: Cluster | None,
) -> None:  # fmt: skip
    """Compare RUN with a baseline: exit 0 within tolerance, 1 when a metric regressed
    (or went missing), 2 for bad input."""
    from charllm_trace.regress.api import check_analysis, options_from_baseline
    from charllm_trace.regress.baseline import read_baseline
    from charllm_trace.regress.tolerance import parse_tolerances

    tols = parse_tolerances(tolerance)
    b = read_baseline(baseline_path)  # bad baseline first: no point analysing the run
    got = regress_analysed(run, options_from_baseline(b), cluster=cluster)
    res = check_analysis(b, got.results(), tols, allow_missing=allow_missing, baseline_path=baseline_path)
    if fmt == "json":
        import orjson

        from charllm_trace.render.contract import stamp

        click.echo(
            orjson.dumps(stamp("check", res.comparison.to_dict()), option=orjson.OPT_INDENT_2).decode()
        )
    else:
        from charllm_trace.render.regress import make_console, print_check

        print_check(res.comparison, make_console(wide), show_all=show_all)
    if not res.comparison.ok:
        sys.exit(EXIT_REGRESSION)


@click.command("diff")
@click.argument("run_a", type=click.Path())
@click.argument("run_b", type=click.Path())
@click.option("--top", default=15, show_default=True, type=click.IntRange(min=1), help="Operators to list.")
@click.option(
    "--hta-compat", is_flag=True, help="Drop kernels launched after the last ProfilerStep begins (HTA)."
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@json_flag
@no_cache_option
@allow_partial_option
@wide_option
@scheduler_option("diff")
def diff_cmd(run_a: str, run_b: str, top: int, hta_compat: bool, fmt: str, wide: bool) -> None:
    """Show two runs side by side: per collective type, per operator, per step (and energy
    per phase), with absolute and relative change from RUN_A to RUN_B."""
    from charllm_trace.analysis.results import AnalyzeOptions
    from charllm_trace.regress.diff import diff_runs

    a, b = (regress_analysed(p, AnalyzeOptions(hta_compat=hta_compat), run=True) for p in (run_a, run_b))
    d = diff_runs(a.loaded(), a.results(), b.loaded(), b.results(), top=top)
    if fmt == "json":
        import orjson

        from charllm_trace.render.contract import stamp

        click.echo(orjson.dumps(stamp("diff", d.to_dict()), option=orjson.OPT_INDENT_2).decode())
        return
    from charllm_trace.render.regress import make_console, print_diff

    print_diff(d, make_console(wide), label_a="A", label_b="B")
    click.echo(f"A = {run_a}\nB = {run_b}")
