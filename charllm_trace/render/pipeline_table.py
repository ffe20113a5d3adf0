"""Terminal table of the pipeline view (``analysis/pipeline.py``) for ``charllm-trace analyze``:
per stage and step, the pipeline window, the stage's bubble against the recognised schedule's
theory and the bubble in each phase. Formatting only: every number comes from
:class:`charllm_trace.analysis.pipeline_results.PipelineResult`."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.fit import FitTable
from charllm_trace.render.table_style import dim_line, simulated_label


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v / 1e6:.3f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def render_pipeline(res: RunAnalysis, console: Console) -> None:
    pipe = res.pipeline
    assert pipe is not None
    t = FitTable("Pipeline bubbles per stage and step" + simulated_label(res), keys=3)
    for name, just in [("rank", "right"), ("step", "right"), ("stage", "right"), ("sched", "left"), ("m", "right"),
         ("window ms", "right"), ("bubble ms", "right"), ("bubble %", "right"), ("theory %", "right"),
         ("warm-up", "right"), ("steady", "right"), ("cool-down", "right")]:  # fmt: skip
        t.add_column(name, just)
    for r in pipe.stages.iter_rows(named=True):
        t.add_row(
            str(r["rank"]), "-" if r["step"] is None else str(r["step"]), f"{r['stage']}/{r['n_stages']}",
            r["schedule"], str(r["n_microbatches"]), _ms(r["window_ns"]), _ms(r["bubble_ns"]),
            _pct(r["bubble_pct"]), _pct(r["theory_pct"]), _ms(r["warmup_bubble_ns"]),
            _ms(r["steady_bubble_ns"]), _ms(r["cooldown_bubble_ns"]),
        )  # fmt: skip
    console.print(t)
    dim_line(
        console,
        "  window = first to last microbatch of the stage's pipeline in the step; bubble = window - "
        "the stage's labelled work; theory = (p-1)/(m+p-1); warm-up, steady, cool-down = bubble (ms) "
        "in each phase; every microbatch: --format json (frame pipeline_microbatches)",
    )
    for n in pipe.notes:
        dim_line(console, f"  note: {n}")


def pipeline_table(res: RunAnalysis, console: Console) -> None:
    """The tables and a blank line, only where there is a result (the reason is in the JSON; the
    analysis registry's terminal renderer of ``pipeline``)."""
    if res.pipeline is not None:
        render_pipeline(res, console)
        console.print()
