"""Terminal table of the pipeline view (``analysis/pipeline.py``) for ``charllm-trace analyze``:
per stage and step, the pipeline window, the stage's bubble against the recognised schedule's
theory and the bubble in each phase. Formatting only: every number comes from
:class:`charllm_trace.analysis.pipeline_results.PipelineResult`."""

from __future__ import annotations

from rich.console import Console

from charllm_trace.analysis.pipeline_results import PIPELINE_STAGE_SCHEMA
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.coltable import Layout, Show, fit_table
from charllm_trace.render.table_style import legend, simulated_label, when_present

STAGES = Layout(
    PIPELINE_STAGE_SCHEMA,
    ["rank", "step", Show("stage", cell=lambda r: f"{r['stage']}/{r['n_stages']}"), Show("schedule", "sched"),
     Show("n_microbatches", "m"), "window_ns", "bubble_ns", "bubble_pct", "theory_pct",
     Show("warmup_bubble_ns", "warm-up"), Show("steady_bubble_ns", "steady"), Show("cooldown_bubble_ns", "cool-down")],
)  # fmt: skip


def render_pipeline(res: RunAnalysis, console: Console) -> None:
    pipe = res.pipeline
    assert pipe is not None
    console.print(
        fit_table("Pipeline bubbles per stage and step" + simulated_label(res), STAGES, pipe.stages, keys=3)
    )
    legend(
        console,
        "  window = first to last microbatch of the stage's pipeline in the step; bubble = window - "
        "the stage's labelled work; theory = (p-1)/(m+p-1); warm-up, steady, cool-down = bubble (ms) "
        "in each phase; every microbatch: --format json (frame pipeline_microbatches)",
        pipe.notes,
    )


pipeline_table = when_present("pipeline", render_pipeline)
