"""The library API of the analyses: ``analyze_run`` (every registered analysis of a run, bundled:
what the CLI's ``analyze`` prints) and each public analysis function under its documented name
(``overlap``, ``bandwidth``, ``energy``, ``power``, ``flops``, ``idle_time``, ``launch_stats``,
``time_breakdown``, ``critical_path``, ``what_if``, ``simulate``): the functions named like their
modules are imported from here, not from the package (docs/analyses.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl

from charllm_trace.analysis.bandwidth import bandwidth, run_hosts
from charllm_trace.analysis.breakdown import time_breakdown
from charllm_trace.analysis.cpu_wait import thread_states
from charllm_trace.analysis.critical import critical_path
from charllm_trace.analysis.energy import energy
from charllm_trace.analysis.flops import flops
from charllm_trace.analysis.graph_merge import keep_steps, skip_cycles, skip_untimed
from charllm_trace.analysis.group_size import ranks_per_node
from charllm_trace.analysis.idle_time import idle_time
from charllm_trace.analysis.launch_stats import launch_stats
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.parallel import name_groups
from charllm_trace.analysis.pipeline import pipeline_from, rank_microbatches
from charllm_trace.analysis.pipeline_results import PipelineResult
from charllm_trace.analysis.power import power
from charllm_trace.analysis.rank_parts import (  # noqa: F401 - NO_DURATIONS, duplicate_step_notes: this module's interface
    NO_DURATIONS,
    analyze_rank,
    duplicate_step_notes,
    layout_of,
    merge_parts,
)
from charllm_trace.analysis.results import (  # the notes' words live with the result types
    CAN_SIMULATE,  # noqa: F401 - part of this module's interface
    NO_TIMESTAMPS,  # noqa: F401 - part of this module's interface
    AnalyzeOptions,
    CriticalPathResult,
    RunAnalysis,
    WhatIfResult,
)
from charllm_trace.analysis.whatif import simulate, what_if
from charllm_trace.core.dag import CycleError
from charllm_trace.core.model import ProcessGroup, Run, Trace
from charllm_trace.graph.run import build_run_graph

#: The library API (docs/analyses.md).
__all__ = [
    "AnalyzeOptions",
    "RunAnalysis",
    "analyze_run",
    "analyze_trace",
    "bandwidth",
    "critical_path",
    "energy",
    "flops",
    "idle_time",
    "launch_stats",
    "overlap",
    "power",
    "simulate",
    "time_breakdown",
    "what_if",
]


def _all_groups(groups_per_rank: list[list[ProcessGroup]]) -> list[ProcessGroup]:
    seen: dict[str, ProcessGroup] = {}
    for groups in groups_per_rank:
        for pg in groups:
            seen.setdefault(pg.name, pg)
    return list(seen.values())


def run_dims(run: Run, options: AnalyzeOptions) -> dict[str, str | None]:
    """Process group -> parallel dimension, from every rank's groups and the layout."""
    return dims_of([tr.meta.process_groups for tr in run], run.manifest, options)


def dims_of(
    groups_per_rank: list[list[ProcessGroup]], manifest: object, options: AnalyzeOptions
) -> dict[str, str | None]:
    """:func:`run_dims` from each rank's process groups (in rank order) and the run's manifest."""
    return name_groups(_all_groups(groups_per_rank), layout_of(manifest, options))


def pipeline_of_run(run: Run, options: AnalyzeOptions | None = None) -> PipelineResult | None:
    """The pipeline view alone (``RunAnalysis.pipeline``), e.g. for the Perfetto export."""
    dims = run_dims(run, options or AnalyzeOptions())
    parts = [rank_microbatches(r, run.traces[r], dims) for r in run.ranks]
    return pipeline_from([f for f, _ in parts], [n for _, ns in parts for n in ns])


def export_overlays(run: Run) -> dict[str, Any]:
    """What the Perfetto export draws beside the trace's nodes: the pipeline view, and per rank the
    launching thread's states from the run's CPU scheduler telemetry (``cpu_wait.thread_states``)."""
    states = None
    if run.cpu_sched is not None:
        states = {k: thread_states(t.nodes, run.cpu_sched[0]) for k, t in run.traces.items()}
    return {"pipeline": pipeline_of_run(run), "cpu_states": states}


def analyze_run(run: Run, options: AnalyzeOptions | None = None) -> RunAnalysis:
    """Overlap, bandwidth, energy and power of every rank of ``run``.

    An analysis that cannot be computed for any rank is None, with the reason in
    ``skipped``. Pure: no I/O, no printing. Each rank's part is computed alone
    (:func:`analysis.rank_parts.analyze_rank`) and the parts merged (``merge_parts``), as the Dask
    engine does on workers and the driver."""
    options = options or AnalyzeOptions()
    dims = run_dims(run, options)
    hosts = run_hosts(run)
    node_gpus = ranks_per_node(run.manifest)
    parts = [
        analyze_rank(r, run.traces[r], options, dims, hosts, node_gpus=node_gpus, keep=True)
        for r in run.ranks
    ]
    work = Run(
        traces={p.rank: p.trace for p in parts if p.trace is not None},
        manifest=run.manifest,
        source=run.source,
    )
    classified = {p.rank: p.classified for p in parts if p.classified is not None}
    recorded = {p.rank: p.recorded for p in parts if p.recorded is not None}

    def graph_step(
        skipped: dict[str, str], no_ts: list[int], simulated: bool
    ) -> tuple[CriticalPathResult | None, WhatIfResult | None]:
        # the graph of a simulated run is built from its recorded order (the engine that simulated it)
        return _graph_analyses(
            run if simulated else work, options, recorded if simulated else classified, skipped, no_ts
        )

    res = merge_parts(
        parts, options, manifest=run.manifest, source=run.source, graph_step=graph_step, cpu_sched=run.cpu_sched
    )
    res.classified = classified
    return res


def _graph_analyses(
    run: Run,
    options: AnalyzeOptions,
    classified: dict[int, pl.DataFrame],
    skipped: dict[str, str],
    no_ts: list[int],
) -> tuple[CriticalPathResult | None, WhatIfResult | None]:
    """Critical path and what-if replay on the execution graph (one graph for both)."""
    if skip_untimed(options, skipped, no_ts):
        return None, None
    try:
        graph = build_run_graph(run, classified)
        cp = critical_path(run, graph=graph, segments=False) if options.critical_path else None
        wi = (
            what_if(
                run, dict(options.what_if), graph=graph, classified=classified, dims=run_dims(run, options)
            )
            if options.what_if
            else None
        )
    except CycleError as exc:
        skip_cycles(options, skipped, exc.problem)
        return None, None
    return keep_steps(options, cp, wi)


def analyze_trace(trace: Trace, options: AnalyzeOptions | None = None, **kw: Any) -> RunAnalysis:
    """``analyze_run`` of one trace; keywords are ``AnalyzeOptions`` fields (applied over ``options``)."""
    opts = dataclasses.replace(options, **kw) if options is not None else AnalyzeOptions(**kw)
    return analyze_run(Run.single(trace), opts)
