"""Steps from a repeated range (``analyze --step-marker NAME``, issue 24): profiles without
``ProfilerStep`` (inference and serving: a decode step, a batch, a module's forward) split by the
ranges of a ``record_function`` name (docs/analyses.md, "Iterations without an optimizer").

- a **marker range** is a CPU range whose name is exactly NAME; only **outermost** ones count: a
  range that starts inside an earlier one (nested in it, or overlapping it from another thread) is
  part of that one, and a note says how many there were;
- the marker ranges play the part of ``ProfilerStep`` ranges: they define which GPU work each step
  launched, and the step windows on GPU time come from them by the one definition
  (:func:`charllm_trace.analysis.step_windows.step_windows`);
- steps are numbered 0, 1, ... in time order, except that when every marker range starts inside
  its own ``ProfilerStep#N`` (a run collected with ``collect --step-marker``) it takes that ``N``.
"""

from __future__ import annotations

import copy

import numpy as np
import polars as pl

from charllm_trace.analysis.step_windows import launch_step_index
from charllm_trace.core.errors import UsageError
from charllm_trace.core.model import STEP_SCHEMA, Trace


def outermost(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Of ranges sorted by start, those that start at or after the end of every earlier one."""
    if start.size == 0:
        return np.zeros(0, dtype=bool)
    reach = np.maximum.accumulate(end)
    return np.concatenate(([True], start[1:] >= reach[:-1]))


def named_ranges(nodes: pl.DataFrame, name: pl.Expr) -> pl.DataFrame:
    """CPU ranges (``name``: a boolean expression on the name) with times: name, start_ns, end_ns,
    sorted by start."""
    return (
        nodes.lazy()
        .filter(
            ~pl.col("on_gpu").fill_null(False)
            & name.fill_null(False)
            & pl.col("start_ns").is_not_null()
            & pl.col("dur_ns").is_not_null()
        )
        .select("name", "start_ns", end_ns=pl.col("start_ns") + pl.col("dur_ns"))
        .sort("start_ns", "end_ns")
        .collect()
    )


def marker_steps(trace: Trace, marker: str) -> tuple[pl.DataFrame, list[str]]:
    """The outermost ranges named ``marker`` as steps (STEP_SCHEMA) and the notes about them."""
    r = named_ranges(trace.nodes, pl.col("name") == marker)
    s, e = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    keep = outermost(s, e)
    s, e = s[keep], e[keep]
    notes = [f"steps: the {s.size} outermost ranges named {marker!r} (--step-marker)"]
    if (~keep).sum():
        notes.append(
            f"{int((~keep).sum())} ranges named {marker!r} start inside another one (nested, or "
            "overlapping it on another thread): each is counted as part of the outer one"
        )
    k = launch_step_index(trace.steps(), s) if trace.step_ranges is None else np.full(s.size, -1)
    numbers = np.arange(s.size, dtype=np.int64)
    if s.size and (k >= 0).all() and np.unique(k).size == k.size:
        numbers = trace.steps()["step"].to_numpy()[k]  # the ProfilerStep#N each one opened
    steps = pl.DataFrame({"step": numbers, "start_ns": s, "end_ns": e}, schema=dict(STEP_SCHEMA))
    return steps, notes


def with_marker_steps(trace: Trace, marker: str) -> tuple[Trace, list[str]]:
    """``trace`` whose steps (``Trace.steps``) are the ranges of ``marker``; a trace that has none
    is refused (one line: the marker, and the most repeated range names to choose from)."""
    steps, notes = marker_steps(trace, marker)
    if steps.height == 0:
        raise UsageError(
            f"--step-marker {marker!r}: no range of that name in the trace"
            + (f" of rank {trace.rank}" if trace.rank is not None else "")
            + _suggest(trace.nodes)
        )
    marked = copy.copy(trace)  # the same tables (dataclasses.replace would conform them again)
    marked.step_ranges = steps
    return marked, notes


def _suggest(nodes: pl.DataFrame) -> str:
    """``; repeated ranges: a (40), b (12)``: the annotations seen most often (CPU, at least twice)."""
    top = (
        nodes.lazy()
        .filter(~pl.col("on_gpu").fill_null(False) & (pl.col("kind") == "annotation"))
        .filter(~pl.col("name").str.starts_with("ProfilerStep#"))
        .group_by("name")
        .len()
        .filter(pl.col("len") > 1)
        .sort("len", "name", descending=[True, False])
        .head(5)
        .collect()
    )
    if top.height == 0:
        return ""
    return "; repeated ranges: " + ", ".join(f"{n} ({c})" for n, c in top.iter_rows())
