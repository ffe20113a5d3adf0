"""What a what-if prediction rests on: the share of the measured critical path that the graph
inferred (wake-ups and thread starts, ``graph.inferred``) or kept as measured (``fixed`` waits of
``graph.calibrate``: they never scale), and the step-to-step spread of the prediction (min–max
over every rank's steps). Pure functions over arrays and frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from charllm_trace.core import dag as engine
from charllm_trace.graph import points as P


@dataclass(frozen=True)
class PathBasis:
    """Of the measured whole-trace critical paths (every rank's, added): their length, and the
    time on fixed waits and on inferred edges (ns)."""

    length_ns: int
    fixed_ns: int
    inferred_ns: int

    def pct(self, part: int) -> float | None:
        return 100.0 * part / self.length_ns if self.length_ns > 0 else None


def path_basis(g: P.PointGraph, t: np.ndarray, bind: np.ndarray, wins: list[tuple[int, int]]) -> PathBasis:
    """:class:`PathBasis` of the paths ending at each ``(sink, start)`` point pair of ``wins``."""
    fixed = inferred = length = 0
    for sink, w0 in wins:
        path = engine.walk_back(g.src, bind, t, sink, int(t[w0]))
        if len(path) < 2:
            continue
        e = bind[path[:-1]]
        e = e[e >= 0]
        fixed += int(np.maximum(g.fixed[e], 0).sum())
        wake = e[g.kind[e] == P.EK["wake"]]
        inferred += int((t[g.dst[wake]] - t[g.src[wake]]).sum())
        length += int(t[sink] - t[path[-1]])
    return PathBasis(length, fixed, inferred)


@dataclass(frozen=True)
class StepSpread:
    """The prediction over steps: how many, and the median, lowest and highest step time and change."""

    n_steps: int
    measured_median_ns: int | None
    predicted_median_ns: int | None
    predicted_low_ns: int | None
    predicted_high_ns: int | None
    change_median_pct: float | None
    change_low_pct: float | None
    change_high_pct: float | None


def step_spread(steps: pl.DataFrame) -> StepSpread:
    """Over every rank's steps of a WHATIF_SCHEMA frame (the whole-trace rows where there are no
    steps)."""
    rows = steps.filter(pl.col("step").is_not_null() & pl.col("predicted_ns").is_not_null())
    if rows.height == 0:
        rows = steps.filter(pl.col("predicted_ns").is_not_null())
    if rows.height == 0:
        return StepSpread(0, None, None, None, None, None, None, None)
    a = rows.select(
        pl.len().alias("n"),
        pl.col("measured_ns").median().alias("m_med"),
        pl.col("predicted_ns").median().alias("p_med"),
        pl.col("predicted_ns").min().alias("p_lo"),
        pl.col("predicted_ns").max().alias("p_hi"),
        pl.col("change_pct").median().alias("c_med"),
        pl.col("change_pct").min().alias("c_lo"),
        pl.col("change_pct").max().alias("c_hi"),
    ).row(0, named=True)

    def i(v: float | None) -> int | None:
        return None if v is None else int(round(v))

    return StepSpread(
        a["n"], i(a["m_med"]), i(a["p_med"]), i(a["p_lo"]), i(a["p_hi"]), a["c_med"], a["c_lo"], a["c_hi"]
    )
