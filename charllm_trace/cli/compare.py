"""``charllm-trace compare RUN RUN ...``: a configuration sweep in one table (one row per run).
Thin: parses the options, analyses each run through the service (``service.py``; its cache), and
hands :func:`charllm_trace.regress.sweep.sweep`'s table to a renderer. Registered by ``cli/app.py``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from charllm_trace.cli.cache import allow_partial_option, json_flag, no_cache_option

LABEL_HELP = (
    "A label of one run: N:KEY=VALUE for run N (1 = the first RUN), or KEY=VALUE repeated in run "
    "order (the k-th KEY=VALUE of a key labels run k). A configuration column (tp, cp, pp, dp, ep, "
    "mbs, gbs, seq, tokens_per_step, model, world, nodes, gpus, device) sets it; tp/cp/pp/dp/ep also name the run's groups by dimension, as analyze --parallel; run "
    "renames the row; any other key adds a column."
)
_LABEL = re.compile(r"^(?:(\d+):)?([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$")
LAYOUT_KEYS = ("tp", "cp", "pp", "dp", "ep")


def parse_labels(texts: tuple[str, ...], n: int) -> list[dict[str, str]]:
    """``--label`` texts -> one dict of labels per run (UsageError for bad text)."""
    from charllm_trace.core.errors import UsageError

    out: list[dict[str, str]] = [{} for _ in range(n)]
    seen: dict[str, int] = {}  # key -> runs labelled in order so far
    for t in texts:
        m = _LABEL.match(t.strip())
        if not m:
            raise UsageError(f"--label {t!r}: expected KEY=VALUE or N:KEY=VALUE")
        idx, key, value = m.group(1), m.group(2).lower(), m.group(3).strip()
        if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in t):  # a terminal escape would reach the terminal
            raise UsageError(f"--label {t!r}: control characters are not allowed")
        if idx is not None:
            i = int(idx) - 1
            if not 0 <= i < n:
                raise UsageError(f"--label {t!r}: there is no run {idx} (runs are numbered 1 to {n})")
        else:
            i = seen.get(key, 0)
            seen[key] = i + 1
            if i >= n:
                raise UsageError(f"--label {t!r}: more {key}= labels than runs ({n})")
        if key in out[i]:
            raise UsageError(f"--label {t!r}: run {i + 1} already has a {key} label")
        out[i][key] = value
    return out


def run_names(paths: tuple[str, ...]) -> list[str]:
    """Each run's name: its file or directory name, with as many parent names as make it unique."""
    parts = [Path(p).resolve().parts for p in paths]
    for k in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-k:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [f"{i + 1}:{p}" for i, p in enumerate(paths)]  # the same path given twice


@click.command("compare")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--label", "labels", multiple=True, metavar="[N:]KEY=VALUE", help=LABEL_HELP)
@click.option("--sort", "sort", default=None, metavar="COLUMN",
              help="Order the runs by COLUMN: best first for a measured column, ascending otherwise.")  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "parquet", "html"]), default="table",
              show_default=True, help="Output format (html: the comparison page, needs -o).")  # fmt: skip
@json_flag
@click.option(
    "-o", "--output", type=click.Path(), default=None, help="Output file (json, csv, parquet, html)."
)
@click.option("--wide", is_flag=True, help="One table, as wide as it takes (default: groups of 80 columns).")
@click.option("--title", default=None, help="Title of the html page.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@no_cache_option
@allow_partial_option
def compare_cmd(
    runs: tuple[str, ...], labels: tuple[str, ...], sort: str | None, fmt: str, output: str | None,
    wide: bool, title: str | None, force: bool,
) -> None:  # fmt: skip
    """Compare RUNs (run directories, ETs, Kineto profiles or saved results) in one table, one row
    per run: configuration, step time, throughput, overlap, exposed communication, bus bandwidth
    per dimension and message size, power, energy per step and per token, throttling, and over a
    CPU-allocation sweep (collect --cpus, or --label cores=N) iteration latency, GPU idle and CPU
    wait per step. The best
    value of each column is marked. Each run is analysed once and its results cached: comparing
    the same runs again reads the cached results (docs/cache.md)."""
    from charllm_trace.cli.results import refuse_existing
    from charllm_trace.core.errors import UsageError

    if len(runs) < 2:
        raise UsageError("compare needs at least two runs ('analyze' shows one)")
    if fmt in ("parquet", "html") and output is None:
        raise UsageError(f"--format {fmt} needs -o FILE")
    if fmt == "table" and output is not None:
        raise UsageError("-o needs --format json, csv, parquet or html")
    if output is not None:
        refuse_existing(output, force)
    per_run = parse_labels(labels, len(runs))
    from charllm_trace.regress.cpu_wait_run import cpu_columns

    rows = [{**_row(path, lab), **cpu_columns(path)} for path, lab in zip(runs, per_run, strict=True)]

    from charllm_trace.regress.sweep import sweep_rows

    try:
        sw = sweep_rows(rows, run_names(runs), per_run)
    except ValueError as exc:
        raise UsageError(f"--label: {exc}") from None
    if sort is not None:
        try:
            sw = sw.sorted_by(sort)
        except KeyError:
            raise UsageError(
                f"--sort {sort!r}: no such column (columns: {', '.join(c.name for c in sw.columns)})"
            ) from None
    _emit(sw, fmt, output, wide, title)


def _row(path: str, labels: dict[str, str]) -> dict[str, Any]:
    """The run's row of the table (``regress.sweep.run_row``), through the service: from the
    cache when it holds it; a results file's as it was saved (its groups were named when it was
    analysed)."""
    from charllm_trace import service
    from charllm_trace.analysis.results import AnalyzeOptions
    from charllm_trace.core.errors import UsageError
    from charllm_trace.service import is_saved

    layout = {k: labels[k] for k in LAYOUT_KEYS if k in labels}
    parallel = None
    if layout and not is_saved(path):
        from charllm_trace.analysis.parallel import check_world

        if not all(v.isascii() and v.isdigit() and int(v) >= 1 for v in layout.values()):
            raise UsageError(f"--label for {path}: tp, cp, pp, dp and ep are whole numbers ≥ 1")
        parallel = {k: int(v) for k, v in layout.items()}
        check_world(parallel, f"--label for {path}")
    got = service.analyze(path, AnalyzeOptions(per_step=True, parallel=parallel), service.Request(row=True))
    assert got.row is not None
    return got.row


def _emit(sw, fmt: str, output: str | None, wide: bool, title: str | None) -> None:  # noqa: ANN001
    from charllm_trace.render import sweep as R

    if fmt == "table":
        from charllm_trace.render.regress import make_console

        R.print_sweep(sw, make_console(), wide=wide)
        return
    if fmt == "html":
        from charllm_trace.render.sweep_html import render_page

        assert output is not None
        Path(output).write_text(render_page(sw, title), encoding="utf-8")
        click.echo(f"wrote {output}", err=True)
        return
    if output is None:
        click.echo(R.to_json(sw).decode() if fmt == "json" else R.to_csv(sw), nl=fmt == "json")
        return
    R.write(sw, fmt, output)
    click.echo(f"wrote {output}", err=True)
