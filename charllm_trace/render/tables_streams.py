"""Terminal tables of the per-stream analyses (``analyze``): GPU idle time per stream by HTA's
categories, and the launch statistics. Formatting only: every number comes from
``RunAnalysis.idle_time`` / ``RunAnalysis.launch``; the tables fit 80 columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
from rich.console import Console

from charllm_trace.analysis.idle_results import IDLE_TIME_SCHEMA, LAUNCH_SCHEMA
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.coltable import Layout, Show, fit_table
from charllm_trace.render.table_style import dim_line, simulated_label
from charllm_trace.render.units import us


def _stream(r: dict[str, Any]) -> str:
    if r["stream"] is None:
        return "all"
    return str(r["stream"]) if r["device"] is None else f"{r['device']}:{r['stream']}"


_STEP, _STREAM = Show("step", missing="all"), Show("stream", cell=_stream)
IDLE = Layout(
    IDLE_TIME_SCHEMA,
    ["rank", _STEP, _STREAM, Show("n_ops", "ops"), "span_ns", "idle_ns", Show("host_wait_pct", "host %"),
     Show("kernel_wait_pct", "kernel %"), Show("other_pct", "other %")],
)  # fmt: skip
#: the title says µs: the delays' headers name no unit
LAUNCH = Layout(
    LAUNCH_SCHEMA,
    ["rank", _STEP, _STREAM, Show("n_launched", "ops"), Show("delay_p50_ns", "p50"), Show("delay_p90_ns", "p90"),
     Show("delay_p99_ns", "p99"), Show("delay_max_ns", "max"), Show("shorter_pct", "short %"),
     Show("queue_max", "q max"), Show("queue_mean", "q mean", "{:.2f}")],
    time=us,
)  # fmt: skip


def _rows(res: RunAnalysis, df: pl.DataFrame) -> pl.DataFrame:
    df = df if res.options.per_step else df.filter(pl.col("step").is_null())
    return df.sort("rank", pl.col("step").is_not_null(), "step", "device", "stream", nulls_last=True)


def _notes(console: Console, notes: list[str]) -> None:
    for n in notes:
        dim_line(console, f"  note: {n}")


def render_idle_time(res: RunAnalysis, console: Console) -> None:
    it = res.idle_time
    assert it is not None
    title = "GPU idle time per stream (HTA's categories)" + (" (HTA convention)" if it.hta_compat else "")
    console.print(fit_table(title + simulated_label(res), IDLE, _rows(res, it.streams)))
    dim_line(
        console,
        "  % of the stream's idle time: host = waiting for the CPU to launch; kernel = gap under "
        f"{it.kernel_wait_threshold_ns / 1e3:g} µs after a launch in time; other = launched in time, "
        "started later (events, syncs)",
    )
    _notes(console, it.notes)


def render_launch(res: RunAnalysis, console: Console, printed: list[str] | None = None) -> None:
    ls = res.launch
    assert ls is not None
    title = "Launch statistics: launch call to GPU start (µs), queue" + simulated_label(res)
    console.print(fit_table(title, LAUNCH, _rows(res, ls.stats)))
    dim_line(
        console,
        "  ops: with a launch call; short % = ops shorter than their launch call; q = ops launched "
        "and not finished; over time: --format json (frame launch_queue) or the report",
    )
    _notes(console, [n for n in ls.notes if n not in (printed or [])])


def render_streams(res: RunAnalysis, console: Console, hint: Callable[[str], str] = str) -> None:
    """The two tables, or one line saying why they were not computed (``hint``: the CLI's words
    added to a reason, ``render.tables.cli_hint``)."""
    if res.idle_time is not None:
        render_idle_time(res, console)
        console.print()
    if res.launch is not None:
        render_launch(res, console, res.idle_time.notes if res.idle_time is not None else None)
        console.print()
    if res.idle_time is None and "idle_time" in res.skipped:
        why = hint(res.skipped["idle_time"])
        console.print(f"idle time and launches: {why}", markup=False, highlight=False)
        console.print()
