"""The report's "Ranks × steps" section: step time and exposed communication per (rank, step),
from the overlap analysis' per-step rows (``OVERLAP_SCHEMA``; ``report`` analyses per step), as
two heatmaps (:mod:`charllm_trace.render.heatmap`). Formatting only: every value is a row's
``span_ns`` or ``exposed_comm_ns``."""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.render.heatmap import heatmap

TITLE = "Ranks × steps"
NOTE = (
    "per rank (rows) and ProfilerStep (columns): the step's time on that rank and its exposed "
    "communication (not overlapped with compute); darker is larger. Hover a cell for its value."
)


def _grid(steps: pl.DataFrame, col: str) -> tuple[np.ndarray, list[int], list[int]]:
    ranks = sorted(steps["rank"].unique().to_list())
    cols = sorted(steps["step"].unique().to_list())
    grid = np.full((len(ranks), len(cols)), np.nan)
    ri = np.searchsorted(np.asarray(ranks), steps["rank"].to_numpy())
    ci = np.searchsorted(np.asarray(cols), steps["step"].to_numpy())
    vals = steps[col].cast(pl.Float64).to_numpy()
    ok = np.isfinite(vals)
    grid[ri[ok], ci[ok]] = vals[ok]
    return grid, ranks, cols


def rank_step_section(steps: pl.DataFrame | None) -> tuple[str, list[str], str] | None:
    """(title, figures, note) of the section, or None with fewer than two ranks or no steps.
    ``steps``: rows with rank, step (not null), span_ns, exposed_comm_ns."""
    if steps is None or steps.height == 0 or steps["rank"].n_unique() < 2:
        return None
    figs = []
    for col, what in (("span_ns", "step time"), ("exposed_comm_ns", "exposed communication")):
        grid, ranks, cols = _grid(steps, col)
        figs.append(
            heatmap(
                grid,
                ranks,
                cols,
                title=f"{what[0].upper()}{what[1:]} per rank and step (ms)",
                row_name="rank",
                col_name="step",
                value_name=what,
                scale=1e6,
                unit=" ms",
            )  # fmt: skip
        )
    return TITLE, figs, NOTE
