"""Terminal tables of the per-stream analyses (``analyze``): GPU idle time per stream by HTA's
categories, and the launch statistics. Formatting only: every number comes from
``RunAnalysis.idle_time`` / ``RunAnalysis.launch``; the tables fit 80 columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
from rich.console import Console

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.table_style import dim_line, plain_table, simulated_label
from charllm_trace.render.units import ms, us

_ms, _us = ms, us


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _stream(r: dict[str, Any]) -> str:
    if r["stream"] is None:
        return "all"
    return str(r["stream"]) if r["device"] is None else f"{r['device']}:{r['stream']}"


def _rows(res: RunAnalysis, df: pl.DataFrame) -> pl.DataFrame:
    df = df if res.options.per_step else df.filter(pl.col("step").is_null())
    return df.sort("rank", pl.col("step").is_not_null(), "step", "device", "stream", nulls_last=True)


def _notes(console: Console, notes: list[str]) -> None:
    for n in notes:
        dim_line(console, f"  note: {n}")


def render_idle_time(res: RunAnalysis, console: Console) -> None:
    it = res.idle_time
    assert it is not None
    t = plain_table(
        "GPU idle time per stream (HTA's categories)"
        + (" (HTA convention)" if it.hta_compat else "")
        + simulated_label(res),
        [("rank", "right"), ("step", "right"), ("stream", "right"), ("ops", "right"), ("span ms", "right"),
         ("idle ms", "right"), ("host %", "right"), ("kernel %", "right"), ("other %", "right")],
    )  # fmt: skip
    for r in _rows(res, it.streams).iter_rows(named=True):
        t.add_row(
            str(r["rank"]), "all" if r["step"] is None else str(r["step"]), _stream(r), str(r["n_ops"]),
            _ms(r["span_ns"]), _ms(r["idle_ns"]), _f(r["host_wait_pct"]), _f(r["kernel_wait_pct"]),
            _f(r["other_pct"]),
        )  # fmt: skip
    console.print(t)
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
    t = plain_table(
        "Launch statistics: launch call to GPU start (µs), queue" + simulated_label(res),
        [("rank", "right"), ("step", "right"), ("stream", "right"), ("ops", "right"), ("p50", "right"),
         ("p90", "right"), ("p99", "right"), ("max", "right"), ("short %", "right"), ("q max", "right"),
         ("q mean", "right")],
    )  # fmt: skip
    for r in _rows(res, ls.stats).iter_rows(named=True):
        t.add_row(
            str(r["rank"]), "all" if r["step"] is None else str(r["step"]), _stream(r), str(r["n_launched"]),
            _us(r["delay_p50_ns"]), _us(r["delay_p90_ns"]), _us(r["delay_p99_ns"]), _us(r["delay_max_ns"]),
            _f(r["shorter_pct"]), _f(r["queue_max"], "{}"), _f(r["queue_mean"], "{:.2f}"),
        )  # fmt: skip
    console.print(t)
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
