"""Steps the recording cut: their figures are not a step's, and no step mean may include them
(docs/analyses.md, "Steps").

A profiler that stops inside a step closes its ``ProfilerStep`` range when it stops, so that
range ends where the recording does: nothing the CPU did is recorded after it. Such a step's
window holds whatever the profiler's stop did (flushes, synchronisation, the last kernels cut
short), not one more iteration: on a 16-rank A100 profile the steps took 208.7–216.4 ms and the
last, cut one 372 ms. A step is **cut by the trace's end** when its ``ProfilerStep`` range ends
within ``END_SLACK_NS`` of the last end of any recorded CPU event. (A step the trace's start cuts
has no ``ProfilerStep`` range at all: the profiler records only ranges that begin while it runs.)

Per-step rows keep such a step, flagged (``cut``); every mean over steps (``compare``'s step time,
exposed communication and energy per step, the rank spread of step time) leaves it out and a note
counts it, unless no whole step is left.
"""

from __future__ import annotations

import polars as pl

from charllm_trace.core.model import Trace

#: a ProfilerStep ending this close to the end of the recording was closed by the profiler stopping
END_SLACK_NS = 1_000


def cut_steps(trace: Trace) -> list[int]:
    """The steps of ``trace`` cut by the trace's end (module docstring), sorted."""
    steps = trace.steps()
    if steps.height == 0:
        return []
    last = (
        trace.nodes.lazy()
        .filter(~pl.col("on_gpu").fill_null(False) & pl.col("start_ns").is_not_null())
        .select((pl.col("start_ns") + pl.col("dur_ns").fill_null(0)).max())
        .collect()
        .item()
    )
    if last is None:
        return []
    return sorted(steps.filter(pl.col("end_ns") >= last - END_SLACK_NS)["step"].to_list())


def cut_note(cut: list[int], n_steps: int) -> str | None:
    """The note on the cut steps of ``n_steps`` (None when none is cut)."""
    if not cut:
        return None
    which = ", ".join(str(s) for s in cut[:5]) + (" ..." if len(cut) > 5 else "")
    if len(cut) >= n_steps:
        return (
            f"every step ({which}) is cut by the trace's end: step means include it, as no whole step is left"
        )
    return f"{len(cut)} step(s) cut by the trace's end ({which}): left out of every mean over steps"


def whole_steps(rows: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Per-step rows (a ``step`` and a ``cut`` column) without the steps cut on any rank, unless
    that leaves none; and how many steps were left out."""
    if "cut" not in rows.columns or rows.height == 0:
        return rows, 0
    cut = rows.filter(pl.col("cut").fill_null(False))["step"].unique()
    kept = rows.filter(~pl.col("step").is_in(cut.implode()))
    if kept.height == 0:
        return rows, 0
    return kept, cut.len()
