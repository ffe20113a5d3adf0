"""``analyze_run`` in two halves: what one rank gives alone (:func:`analyze_rank`, a
:class:`RankPart`) and what needs every rank (:func:`merge_parts`: notes merged across ranks,
bandwidth's matching and skew across ranks, the run's ``skipped`` reasons).

The local path (``analysis/api.py``) computes every rank's part in this process; the Dask engine
(``charllm_trace/engine``) computes each part on a worker and sends only the part (no node
tables) to the driver, which merges them: both give the same ``RunAnalysis``. What a rank needs
from the others (process-group dimensions, every rank's host) is small and passed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.marker_steps import with_marker_steps
from charllm_trace.analysis.rank_steps import NO_DURATIONS, layout_of
from charllm_trace.analysis.registry import Merge, in_steps, merge_notes, resolve
from charllm_trace.analysis.results import (
    NO_STEPS,
    AnalyzeOptions,
    CriticalPathResult,
    RunAnalysis,
    WhatIfResult,
)
from charllm_trace.analysis.whatif import simulate
from charllm_trace.core.classify import classify
from charllm_trace.core.launch_gap import lost_device_activity
from charllm_trace.core.model import Trace, TraceMeta

__all__ = [
    "NO_DURATIONS",
    "RankPart",
    "analyze_rank",
    "duplicate_step_notes",
    "layout_of",
    "merge_notes",
    "merge_parts",
]

#: (skipped, no_ts ranks, simulated) -> (critical path, what-if): the graph analyses, which
#: need every rank's graph at once
GraphStep = Callable[[dict[str, str], list[int], bool], tuple[CriticalPathResult | None, WhatIfResult | None]]


@dataclass
class RankPart:
    """What one rank contributes to a run's analysis (small: no node tables unless kept):
    ``parts[name]``, each registered analysis' per-rank part (``analysis/registry.py``), and the
    facts the merge reads across analyses."""

    rank: int
    no_ts: bool = False  # no timestamps (and not simulated)
    no_dur: bool = False  # neither timestamps nor durations
    simulated: bool = False  # this rank's timeline was rebuilt here
    parts: dict[str, Any] = field(default_factory=dict)
    dup_notes: list[str] = field(default_factory=list)
    lost: str | None = None  # the profile lost its device activity
    meta: TraceMeta | None = None  # the rank's metadata, without process groups or extras (run_config)
    # kept by the local path only (the report's views and the execution graph need them)
    trace: Trace | None = None
    recorded: pl.DataFrame | None = None
    classified: pl.DataFrame | None = None


def has_durations(trace: Trace) -> bool:
    d = trace.nodes["dur_ns"]
    return bool((d.fill_null(0) > 0).any())


def duplicate_step_notes(trace: Trace) -> list[str]:
    """A note per ``ProfilerStep#N`` number that more than one range carries (the steps table
    keeps the first of them)."""
    if not trace.meta.has_timestamps:
        return []
    n = (
        trace.nodes.filter(~pl.col("on_gpu") & pl.col("name").str.starts_with("ProfilerStep#"))
        .select(pl.col("name").str.extract(r"ProfilerStep#(\d+)", 1).cast(pl.Int64).alias("step"))
        .drop_nulls()
        .group_by("step")
        .len()
        .filter(pl.col("len") > 1)
        .sort("step")
    )
    return [
        f"ProfilerStep#{s} appears {k} times: per-step figures use the first (the others are in the whole-trace row)"
        for s, k in n.iter_rows()
    ]


def _timeline(part: RankPart, trace: Trace, options: AnalyzeOptions) -> Trace:
    """The timeline analysed: the trace, or a simulated copy of one without timestamps."""
    if trace.meta.has_timestamps:
        return trace
    if options.simulate and not has_durations(trace):
        part.no_dur = part.no_ts = True  # nothing to simulate from: every time would be 0
    elif options.simulate:
        part.simulated = True
        return simulate(trace)
    else:
        part.no_ts = True
    return trace


def analyze_rank(
    rank: int,
    trace: Trace,
    options: AnalyzeOptions,
    dims: Mapping[str, str | None],
    hosts: Mapping[int, str | None],
    *,
    node_gpus: int | None = None,
    keep: bool = False,
) -> RankPart:
    """One rank's part of ``analyze_run``: every registered analysis' per-rank function, in the
    registry's order, on one :class:`RankContext`. ``dims``: process group -> dimension (of the
    whole run); ``hosts``: every rank's host; ``node_gpus``: the run's GPUs per node, when known.
    ``keep``: also keep the (simulated) trace and its classified table (the local path's report
    views and execution graph use them)."""
    part = RankPart(rank=rank)
    marker_notes: list[str] = []
    if options.step_marker and trace.meta.has_timestamps:  # steps: the marker's ranges
        trace, marker_notes = with_marker_steps(trace, options.step_marker)
    tr = _timeline(part, trace, options)
    # classified once (the classes do not depend on times: a simulated copy takes its original's);
    # the context cuts the step windows once, on first use (analysis/context.py)
    recorded = classify(trace.nodes)
    classified = recorded if tr is trace else tr.nodes.with_columns(recorded["cls"])
    ctx = RankContext(tr, classified, recorded, rank, dims, hosts, node_gpus, part.no_ts, marker_notes)
    ctx.parts = part.parts  # a later step's per-rank function may read an earlier one's part
    for a in in_steps():
        if a.rank is not None:
            part.parts[a.name] = resolve(a.rank)(ctx, options)
    part.lost = lost_device_activity(tr.nodes)
    part.meta = dataclasses.replace(tr.meta, process_groups=(), extra={})
    part.dup_notes = duplicate_step_notes(tr)
    if options.per_step and not part.no_ts and tr.steps().height == 0:
        part.dup_notes.append(NO_STEPS)
    if keep:
        part.trace, part.recorded, part.classified = tr, recorded, ctx.classified
    return part


def merge_parts(
    parts: list[RankPart],
    options: AnalyzeOptions,
    *,
    manifest: object,
    source: str | None,
    graph_step: GraphStep,
    cpu_sched: object = None,
) -> RunAnalysis:
    """The run's analysis from every rank's part (in rank order): every registered analysis'
        merge, in the registry's order. ``graph_step`` adds the critical path and what-if (or says in
        ``skipped`` why not); ``cpu_sched``: the run's CPU scheduler samples (``Run.cpu_sched``), for
    the CPU-wait analysis."""
    multi = len(parts) > 1
    simulated = any(p.simulated for p in parts)
    m = Merge(
        parts, options, simulated, multi, {}, manifest=manifest, graph_step=graph_step, cpu_sched=cpu_sched
    )
    results = m.results  # filled in step order: a merge reads those before it
    for a in in_steps():
        if a.merge is not None:
            results[a.name] = resolve(a.merge)(m)
    no_ts = [p.rank for p in parts if p.no_ts]
    no_dur = [p.rank for p in parts if p.no_dur]
    if no_dur and len(no_dur) == len(no_ts):
        for k in ("critical_path", "what_if"):
            if k in m.skipped:
                m.skipped[k] = NO_DURATIONS
    _cross_notes(parts, results, multi, manifest)
    own = {f.name for f in dataclasses.fields(RunAnalysis)}
    return RunAnalysis(
        **{k: v for k, v in results.items() if k in own},
        extra={k: v for k, v in results.items() if k not in own},  # registered, no field of its own
        skipped=m.skipped,
        ranks=[p.rank for p in parts],
        simulated=simulated,
        source=source,
        options=options,
    )


def _cross_notes(parts: list[RankPart], results: dict[str, Any], multi: bool, manifest: object) -> None:
    """The notes that are no one analysis' own: a profile that lost its device activity (said
    first, in the first result shown), steps numbered twice, a partial run."""
    lost = [(p.rank, [p.lost]) for p in parts if p.lost is not None]
    shown = next((results[k] for k in ("overlap", "bandwidth") if results.get(k) is not None), None)
    if lost and shown is not None:
        shown.notes[:0] = merge_notes(lost, multi)
    dup = merge_notes([(p.rank, p.dup_notes) for p in parts], multi)
    target = next(
        (results[k] for k in ("overlap", "power", "bandwidth", "energy") if results.get(k) is not None), None
    )
    if dup and target is not None:  # reported, not dropped silently (the first of each is used)
        target.notes.extend(dup)
    partial = manifest.get("partial") if isinstance(manifest, dict) else None
    if isinstance(partial, str):  # --allow-partial: every result says it covers part of the run
        for a in in_steps():
            r = results.get(a.name)
            if a.partial_note and r is not None:
                r.notes.insert(0, partial)
