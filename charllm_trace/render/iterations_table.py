"""Terminal tables (rich) of iterations, their phases and request latency (issue 24), for
``charllm-trace analyze``. Formatting only: every number comes from
:class:`charllm_trace.analysis.iterations_results.IterationsResult`. Fits 80 columns."""

from __future__ import annotations

import polars as pl
from rich.console import Console

from charllm_trace.analysis.columns import Col, columns
from charllm_trace.analysis.iterations_results import ITERATION_SCHEMA, PHASE_SCHEMA
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.coltable import Layout, Show, fit_table, new_table
from charllm_trace.render.table_style import dim_line, simulated_label, when_present
from charllm_trace.render.units import ms as _ms

MAX_ROWS = 20  # iterations shown (the JSON output has them all)

#: the title says ms: no unit in the headers; the phases' CPU time follows as columns of their own
ITERATIONS = Layout(ITERATION_SCHEMA, ["rank", "step", Show("cpu_ns", "CPU"), "window_ns"], units={})
WHOLE_PHASES = Layout(
    PHASE_SCHEMA,
    ["rank", "phase", Show("n", "ranges"), Show("cpu_ns", "CPU ms"), Show("n_gpu_ops", "GPU ops"),
     Show("gpu_ns", "GPU ms")],
)  # fmt: skip

#: the requests' summary per rank (made here from the requests frame)
REQUESTS = Layout(
    columns(
        Col("rank", pl.Int64), Col("n", pl.Int64), Col("tokens", pl.Int64), Col("ttft_mean", pl.Float64, "ns"),
        Col("ttft_p50", pl.Float64, "ns"), Col("ttft_max", pl.Int64, "ns"), Col("tpot_mean", pl.Float64, "ns"),
    ),
    ["rank", Show("n", "requests"), "tokens", Show("ttft_mean", "TTFT mean ms"), Show("ttft_p50", "p50"),
     Show("ttft_max", "max"), Show("tpot_mean", "TPOT mean ms")],
)  # fmt: skip


def render_iterations(res: RunAnalysis, console: Console) -> None:
    it = res.iterations
    assert it is not None
    if it.iterations.height:
        phases = it.phases.filter(pl.col("step").is_not_null())
        names = phases["phase"].unique(maintain_order=True).to_list()[:4]
        heads = ITERATIONS.heads + [(p, "right") for p in names]
        t = new_table("Iterations (ms)" + simulated_label(res), heads)
        cpu = {(r, s, p): c for r, s, p, c in phases.select("rank", "step", "phase", "cpu_ns").iter_rows()}
        for r in it.iterations.head(MAX_ROWS).iter_rows(named=True):
            t.add_row(*ITERATIONS.row(r), *[_ms(cpu.get((r["rank"], r["step"], p))) for p in names])
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
    if whole.height:
        console.print(fit_table("Phases (whole trace)", WHOLE_PHASES, whole))


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
    console.print(fit_table("Requests: time to first token, time per output token", REQUESTS, s))
    dim_line(console, "  request#ID start = arrival; token#ID end = a token on the host (docs/analyses.md)")


iterations_table = when_present("iterations", render_iterations)
