"""The HTML report's pipeline section: a Gantt chart per traced step (one row per rank, labelled
with its stage; each microbatch's forward and backward drawn where they ran, labelled with the
microbatch number; the gaps are the bubbles) and the bubble table. Drawing only: every number
comes from :class:`charllm_trace.analysis.pipeline_results.PipelineResult`."""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.analysis.pipeline_results import PIPELINE_STAGE_SCHEMA, PipelineResult
from charllm_trace.render.coltable import Show
from charllm_trace.render.report_sections import html_layout, html_rows, notes_list
from charllm_trace.render.svg import MB, ML, MR, MT, Scale, W, axis_x, empty, esc, figure, swatches

KIND_COLORS = {"forward": "#4c78a8", "backward": "#f58518"}
#: Charts drawn (steps) and rows per chart, so a huge run stays a readable page.
MAX_STEPS = 4
MAX_ROWS = 32
ROW_H, GAP = 18, 4
PIPELINE_NOTE = (
    "per stage and step: the stage's bubble is its pipeline's window (first to last labelled microbatch "
    "on any of its stages) less the stage's own labelled work; theory = (p-1)/(m+p-1) for a recognised "
    "1F1B or GPipe order (docs/analyses.md, Pipeline bubbles)"
)


def _rows(mb: pl.DataFrame) -> list[tuple[int, int, str]]:
    r = mb.select("rank", "stage", "pipeline").unique().sort("pipeline", "stage", "rank")
    return [(int(a), int(b), str(c)) for a, b, c in r.head(MAX_ROWS).iter_rows()]


def _bars(g: pl.DataFrame, sx: Scale, y: float, t0: int) -> list[str]:
    out = []
    for kind, i, a, b, busy in g.select("kind", "microbatch", "start_ns", "end_ns", "busy_ns").iter_rows():
        x0, x1 = float(sx(a - t0)), float(sx(b - t0))
        w = max(x1 - x0, 1.0)
        tip = f"{kind} microbatch {i}: {(b - a) / 1e6:,.3f} ms ({busy / 1e6:,.3f} ms work)"
        out.append(
            f'<rect class="mb" x="{x0:.1f}" y="{y:.1f}" width="{w:.1f}" height="{ROW_H - 2}" '
            f'fill="{KIND_COLORS.get(kind, "#999")}"><title>{esc(tip)}</title></rect>'
        )
        if w >= 12:
            out.append(
                f'<text x="{x0 + w / 2:.1f}" y="{y + ROW_H - 6:.1f}" text-anchor="middle" font-size="10" '
                f'fill="#fff">{"F" if kind == "forward" else "B"}{i}</text>'
            )
    return out


def gantt(mb: pl.DataFrame, step: int) -> str:
    """Stage x time of one step: a row per rank, a bar per microbatch forward/backward."""
    g = mb.filter(pl.col("step") == step)
    title = f"Pipeline schedule, step {step} (rank · stage; F/B = forward/backward of microbatch k)"
    if g.height == 0:
        return empty(title, "no labelled microbatch in this step")
    rows = _rows(g)
    t0, t1 = int(g["start_ns"].min()), int(g["end_ns"].max())  # type: ignore[arg-type]
    height = MT + len(rows) * (ROW_H + GAP) + MB + 4
    sx = Scale(0, t1 - t0, ML + 40, W - MR)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    parts += axis_x(sx, 0, t1 - t0, height - MB, MT, "time since the step's first microbatch", "time")
    parts.append('<g class="plot">')
    for k, (rank, stage, _pipe) in enumerate(rows):
        y = MT + k * (ROW_H + GAP) + GAP / 2
        parts.append(
            f'<text x="{ML + 34}" y="{y + ROW_H - 5:.1f}" text-anchor="end" font-size="10">r{rank} · s{stage}</text>'
        )
        parts += _bars(g.filter(pl.col("rank") == rank), sx, y, t0)
    parts.append("</g></svg>")
    legend = swatches([(k, c) for k, c in KIND_COLORS.items()])
    n_rows = g["rank"].n_unique()
    note = f"first {MAX_ROWS} of {n_rows} ranks" if n_rows > MAX_ROWS else ""
    return figure("gantt", title, "".join(parts), legend, note)


STAGES = html_layout(
    PIPELINE_STAGE_SCHEMA,
    ["rank", "step", Show("stage", cell=lambda r: f"{r['stage']}/{r['n_stages']}"), "schedule",
     Show("n_microbatches", "m"), "window_ns", "bubble_ns", "bubble_pct", "theory_pct",
     Show("warmup_bubble_ns", "warm-up bubble ms"), "steady_bubble_ns", Show("cooldown_bubble_ns", "cool-down bubble ms")],
)  # fmt: skip


def pipeline_parts(pipe: PipelineResult | None) -> list[str]:
    """The section's figures and table (nothing when the run has no labelled microbatches)."""
    if pipe is None or pipe.microbatches.height == 0:
        return []
    steps = sorted(s for s in pipe.microbatches["step"].unique().to_list() if s is not None)[:MAX_STEPS]
    out = [gantt(pipe.microbatches, s) for s in steps]
    out.append(html_rows(STAGES, pipe.stages))
    if pipe.notes:
        out.append(notes_list(pipe.notes))
    return out


def pipeline_section(data: Any, rep: Any) -> None:
    """The report's section, only where microbatches are labelled (the registry's HTML renderer
    of ``pipeline``)."""
    if parts := pipeline_parts(data.results.get("pipeline")):
        rep.add("Pipeline bubbles", *parts, note=PIPELINE_NOTE, sid="pipeline")
