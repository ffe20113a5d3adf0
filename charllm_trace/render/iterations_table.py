"""Terminal tables (rich) of iterations, their phases and request latency (issue 24), for
``charllm-trace analyze``. Formatting only: every number comes from
:class:`charllm_trace.analysis.iterations_results.IterationsResult`. Fits 80 columns."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.table_style import dim_line, plain_table, simulated_label

MAX_ROWS = 20  # iterations shown (the JSON output has them all)


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v / 1e6:.3f}"


def render_iterations(res: RunAnalysis, console: Console) -> None:
    it = res.iterations
    assert it is not None
    if it.iterations.height:
        phases = it.phases.filter(pl.col("step").is_not_null())
        names = phases["phase"].unique(maintain_order=True).to_list()[:4]
        t = plain_table(
            "Iterations (ms)" + simulated_label(res),
            [("rank", "right"), ("step", "right"), ("CPU", "right"), ("window", "right")]
            + [(p, "right") for p in names],
        )
        cpu = {(r, s, p): c for r, s, p, c in phases.select("rank", "step", "phase", "cpu_ns").iter_rows()}
        for r in it.iterations.head(MAX_ROWS).iter_rows(named=True):
            t.add_row(
                str(r["rank"]), str(r["step"]), _ms(r["cpu_ns"]), _ms(r["window_ns"]),
                *[_ms(cpu.get((r["rank"], r["step"], p))) for p in names],
            )  # fmt: skip
        console.print(t)
        dim_line(console, "  CPU = the step's range; window = its GPU-time window; phases: their CPU time")
        if it.iterations.height > MAX_ROWS:
            console.print(
                f"  ... {it.iterations.height - MAX_ROWS} more iterations (--json has all)", style="dim"
            )
    _whole_phases(it.phases, console)
    _requests(it.requests, console)
    for n in it.notes:
        dim_line(console, f"  note: {n}")


def _whole_phases(phases: pl.DataFrame, console: Console) -> None:
    whole = phases.filter(pl.col("step").is_null())
    if whole.height == 0:
        return
    t = plain_table("Phases (whole trace)", [("rank", "right"), ("phase", "left"), ("ranges", "right"),
                    ("CPU ms", "right"), ("GPU ops", "right"), ("GPU ms", "right")])  # fmt: skip
    for r in whole.iter_rows(named=True):
        t.add_row(
            str(r["rank"]), r["phase"], str(r["n"]), _ms(r["cpu_ns"]), str(r["n_gpu_ops"]), _ms(r["gpu_ns"])
        )
    console.print(t)


def _requests(req: pl.DataFrame, console: Console) -> None:
    if req.height == 0:
        return
    s = (
        req.group_by("rank")
        .agg(
            n=pl.len(),
            ttft_mean=pl.col("ttft_ns").mean(),
            ttft_p50=pl.col("ttft_ns").median(),
            ttft_max=pl.col("ttft_ns").max(),
            tpot_mean=pl.col("tpot_ns").mean(),
            tokens=pl.col("n_tokens").sum(),
        )
        .sort("rank")
    )
    t = plain_table("Requests: time to first token, time per output token", [("rank", "right"), ("requests", "right"),
                    ("tokens", "right"), ("TTFT mean ms", "right"), ("p50", "right"), ("max", "right"),
                    ("TPOT mean ms", "right")])  # fmt: skip
    for r in s.iter_rows(named=True):
        t.add_row(str(r["rank"]), str(r["n"]), str(r["tokens"]), _ms(r["ttft_mean"]), _ms(r["ttft_p50"]),
                  _ms(r["ttft_max"]), _ms(r["tpot_mean"]))  # fmt: skip
    console.print(t)
    dim_line(console, "  request#ID start = arrival; token#ID end = a token on the host (docs/analyses.md)")


def iterations_table(res: RunAnalysis, console: Console) -> None:
    """The tables and a blank line, only where there is a result (the reason is in the JSON; the
    analysis registry's terminal renderer of ``iterations``)."""
    if res.iterations is not None:
        render_iterations(res, console)
        console.print()
