"""Terminal tables of power per microbatch phase and of the power excursion per step
(``analysis/phase_power.py``) for ``charllm-trace analyze``. Formatting only: every number comes
from :class:`charllm_trace.analysis.phase_power_results.PhasePowerResult`."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.fit import FitTable
from charllm_trace.render.table_style import dim_line, simulated_label


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _table(title: str, cols: list[tuple[str, str]], keys: int) -> FitTable:
    t = FitTable(title, keys=keys)
    for name, just in cols:
        t.add_column(name, just)
    return t


def render_phase_power(res: RunAnalysis, console: Console) -> None:
    pp = res.phase_power
    assert pp is not None
    if pp.phases.height:
        t = _table(
            "Power per microbatch phase" + simulated_label(res),
            [("rank", "right"), ("dev", "right"), ("step", "right"), ("stage", "right"), ("phase", "left"),
             ("spans", "right"), ("ms", "right"), ("J", "right"), ("avg W", "right"), ("GFLOP/s", "right")],
            keys=5,
        )  # fmt: skip
        for r in pp.phases.iter_rows(named=True):
            t.add_row(
                str(r["rank"]), str(r["device"]), str(r["step"]), str(r["stage"]), r["phase"],
                _f(r["count"], "{:,}"), _f(r["time_ns"] / 1e6, "{:,.3f}"), _f(r["energy_j"], "{:,.3f}"),
                _f(r["avg_w"], "{:,.1f}"), _f(r["flops_per_s"] and r["flops_per_s"] / 1e9, "{:,.2f}"),
            )  # fmt: skip
        console.print(t)
    t = _table(
        "Power excursion per step" + simulated_label(res),
        [("rank", "right"), ("dev", "right"), ("step", "left"), ("avg W", "right"), ("peak W", "right"),
         ("peak-avg W", "right"), ("limit W", "right"), ("peak-limit W", "right"), ("at/above limit ms", "right")],
        keys=3,
    )  # fmt: skip
    for r in pp.excursions.iter_rows(named=True):
        t.add_row(
            str(r["rank"]), str(r["device"]), "whole" if r["step"] is None else str(r["step"]),
            _f(r["avg_w"], "{:,.1f}"), _f(r["peak_w"], "{:,.1f}"), _f(r["excursion_w"], "{:,.1f}"),
            _f(r["power_limit_w"], "{:,.0f}"), _f(r["over_limit_w"], "{:+,.1f}"),
            _f(r["above_limit_ns"] and r["above_limit_ns"] / 1e6, "{:,.1f}"),
        )  # fmt: skip
    console.print(t)
    dim_line(
        console,
        "  phases: a stage's forward and backward spans and its bubble (the rest of its pipeline's window), "
        "energy = the integral of the rank's power over them; excursion: peak - mean of the step, and "
        "peak - power limit (positive: above it); per step with --per-step",
    )
    for n in pp.notes:
        dim_line(console, f"  note: {n}")


def phase_power_table(res: RunAnalysis, console: Console) -> None:
    """The tables and a blank line, only with power telemetry (the analysis registry's terminal
    renderer of ``phase_power``)."""
    if res.phase_power is not None:
        render_phase_power(res, console)
        console.print()
