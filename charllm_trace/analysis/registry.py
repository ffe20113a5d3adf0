"""The analysis registry: every analysis of ``analyze_run`` declared once, in :data:`ANALYSES`.

An entry (:class:`Analysis`) names, in one place:

- ``name``: its field of :class:`~charllm_trace.analysis.results.RunAnalysis`, its key in
  ``skipped`` and in the notes;
- ``result``: its result type, and ``frames``: the frames of that result in machine outputs
  (JSON, CSV/Parquet, the JSON Schema), each with the result attribute holding it and its columns;
- ``rank``: its per-rank function ``(RankContext, AnalyzeOptions) -> part`` (what a Dask worker
  computes and sends; ``analysis/context.py``), and ``merge``: ``(Merge) -> result | None``, the
  run's result from every rank's part (setting ``skipped[name]`` when there is none);
- ``step``: where it runs among the others (per rank and in the merge, in that order);
- ``added``: whether it came after the first files of results format version 1 (saved results
  without it load with it None and a reason);
- ``optional``: computed only where the run has its data (CPU scheduler telemetry, graph
  launches): without it the result is None, nothing is said in ``skipped`` and its frames are not
  in the JSON document (nor required by its schema);
- ``table`` and ``html``: its renderers (terminal table, HTML report sections), named by
  reference so that the analysis layer imports no renderer; ``table_at`` / ``html_at``: their
  places in the printed output and the page.

Functions, result types and column tables are named ``"module:attribute"`` and loaded on first
use (:func:`resolve`), so the registry imports nothing of the analyses: the result types' module
loops over it (``RunAnalysis.frames``) without an import circle, and reading it (saved results,
the JSON Schema) loads no analysis and no renderer. The loops over
it: ``analysis/rank_parts.py`` (per rank and merge), ``RunAnalysis.frames``/``notes``,
``store/results.py`` (saved results), ``analysis/frame_schemas.py`` (the JSON document and its
schema), ``render/tables.py`` (the terminal) and ``render/report.py`` (the HTML page). Adding an analysis:
docs/architecture.md, "Adding an analysis".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import polars as pl

from charllm_trace.core.model import rank_ranges

#: The steps of analyze_run, for an entry's ``step`` (per rank and in the merge, in this order).
_STEPS = "rank_steps"


@dataclass(frozen=True)
class Frame:
    """One frame of a result in machine outputs: its stable name, the result attribute that
    holds it, and its columns (a reference to their declaration, :attr:`columns` the table)."""

    name: str
    attr: str
    columns_ref: str

    @property
    def columns(self) -> dict[str, pl.DataType]:
        """The frame's columns: name -> polars dtype."""
        return resolve(self.columns_ref)  # type: ignore[return-value]


@dataclass(frozen=True)
class Analysis:
    """One analysis, declared once (module docstring)."""

    name: str
    result_ref: str
    frames: tuple[Frame, ...]
    step: int
    rank: str | None = None
    merge: str | None = None
    added: bool = False
    partial_note: bool = True  # --allow-partial: the result says it covers part of the run
    optional: bool = False  # computed only where the run has its data: no frames, no reason otherwise
    table: str | None = None
    table_at: float | None = None
    html: str | None = None
    html_at: float | None = None
    doc: str = ""

    @property
    def result(self) -> type:
        """The result type (its module loaded on first use)."""
        return resolve(self.result_ref)  # type: ignore[return-value]

    def get(self, res: Any) -> Any:
        """This analysis' result in ``res`` (a RunAnalysis: its field, or ``extra``), or None."""
        return getattr(res, self.name, None)

    def frames_of(self, result: Any) -> dict[str, pl.DataFrame]:
        """The frames of ``result`` (this analysis' result), by their stable names."""
        return {f.name: getattr(result, f.attr) for f in self.frames}


def _m(module: str, attr: str) -> str:
    return f"charllm_trace.{module}:{attr}"


_S = f"analysis.{_STEPS}"

#: Every analysis of ``analyze_run``, in the order of machine outputs (frames, notes, saved
#: results). ``step``: the order they run in (per rank, then merged).
ANALYSES: list[Analysis] = [
    Analysis(
        "overlap",
        _m("analysis.results", "OverlapResult"),
        (
            Frame("overlap", "per_rank", _m("analysis.results", "OVERLAP_SCHEMA")),
            Frame("overlap_by_group", "per_group", _m("analysis.results", "OVERLAP_GROUP_SCHEMA")),
            Frame("overlap_by_dim", "per_dim", _m("analysis.results", "OVERLAP_GROUP_SCHEMA")),
            Frame("rank_spread", "rank_spread", _m("analysis.spread_results", "RANK_SPREAD_SCHEMA")),
        ),
        step=0,
        rank=_m(_S, "overlap_part"),
        merge=_m(_S, "merge_overlap"),
        table=_m("render.tables", "overlap_table"),
        table_at=0,
        html=_m("render.report_analyses", "overlap_section"),
        html_at=1,
        doc="compute/communication overlap per rank, step, process group and dimension",
    ),
    Analysis(
        "bandwidth",
        _m("analysis.results", "BandwidthResult"),
        (
            Frame("collectives", "collectives", _m("analysis.results", "COLLECTIVE_SCHEMA")),
            Frame("bandwidth", "summary", _m("analysis.results", "BANDWIDTH_SUMMARY_SCHEMA")),
            Frame("collectives_matched", "matched", _m("analysis.results", "MATCHED_SCHEMA")),
            Frame("stragglers", "stragglers", _m("analysis.results", "STRAGGLER_SCHEMA")),
        ),
        step=2,
        rank=_m(_S, "bandwidth_part"),
        merge=_m(_S, "merge_bandwidth"),
        table=_m("render.tables", "bandwidth_table"),
        table_at=1,
        html=_m("render.report_analyses", "bandwidth_section"),
        html_at=6,
        doc="bandwidth per collective, matched across ranks; stragglers",
    ),
    Analysis(
        "energy",
        _m("analysis.results", "EnergyResult"),
        (
            Frame("energy_totals", "totals", _m("analysis.results", "ENERGY_TOTAL_SCHEMA")),
            Frame("energy", "by", _m("analysis.results", "ENERGY_SCHEMA")),
        ),
        step=3,
        rank=_m(_S, "energy_part"),
        merge=_m(_S, "merge_energy"),
        table=_m("render.tables", "energy_table"),
        table_at=2,
        html=_m("render.report_analyses", "energy_section"),
        html_at=10,
        doc="energy per operator, from power telemetry",
    ),
    Analysis(
        "power",
        _m("analysis.results", "PowerResult"),
        (
            Frame("power", "per_step", _m("analysis.results", "POWER_SCHEMA")),
            Frame("throttle", "throttle", _m("analysis.results", "THROTTLE_SCHEMA")),
        ),
        step=3,
        merge=_m(_S, "merge_power"),  # its per-rank part is energy's (one telemetry pass)
        table=_m("render.tables", "power_table"),
        table_at=3,
        html=_m("render.report_analyses", "power_section"),
        html_at=11,
        doc="power and thermal per step",
    ),
    Analysis(
        "critical_path",
        _m("analysis.results", "CriticalPathResult"),
        (
            Frame("critical_path", "paths", _m("analysis.results", "CRITICAL_PATH_SCHEMA")),
            Frame("critical_path_ops", "top_ops", _m("analysis.results", "CRITICAL_OPS_SCHEMA")),
        ),
        step=5,
        merge=_m(_S, "merge_graph"),  # every rank's graph at once: the merge builds it
        partial_note=False,
        table=_m("render.tables", "critical_path_table"),
        table_at=5,
        html=_m("render.report_analyses", "critical_path_section"),
        html_at=3,
        doc="critical paths through the execution graph",
    ),
    Analysis(
        "what_if",
        _m("analysis.whatif_results", "WhatIfResult"),
        (Frame("what_if", "steps", _m("analysis.whatif_results", "WHATIF_SCHEMA")),),
        step=5,
        merge=_m(_S, "merge_what_if"),  # computed with the critical path, on the same graph
        partial_note=False,
        table=_m("render.tables", "what_if_table"),
        table_at=6,
        html=_m("render.report_analyses", "what_if_section"),
        html_at=4,
        doc="a what-if replay of the execution graph (PREDICTED)",
    ),
    Analysis(
        "idle_time",
        _m("analysis.idle_results", "IdleTimeResult"),
        (Frame("idle_time", "streams", _m("analysis.idle_results", "IDLE_TIME_SCHEMA")),),
        step=1,
        rank=_m(_S, "streams_part"),
        merge=_m(_S, "merge_idle_time"),
        added=True,
        table=_m("render.tables", "streams_table"),  # idle time and launches, one section
        table_at=7,
        html=_m("render.report_analyses", "streams_section"),
        html_at=5,
        doc="GPU idle time per stream (HTA's breakdown)",
    ),
    Analysis(
        "launch",
        _m("analysis.idle_results", "LaunchResult"),
        (
            Frame("launch_stats", "stats", _m("analysis.idle_results", "LAUNCH_SCHEMA")),
            Frame("launch_queue", "queue", _m("analysis.idle_results", "QUEUE_SCHEMA")),
        ),
        step=1,
        merge=_m(_S, "merge_launch"),  # its per-rank part is idle time's (one stream table)
        added=True,
        doc="launch delays, short kernels, launch queues",
    ),
    Analysis(
        "config",
        _m("analysis.config_results", "RunConfig"),
        (Frame("config", "table", _m("analysis.config_results", "CONFIG_SCHEMA")),),
        step=10,
        merge=_m(_S, "merge_config"),
        added=True,
        partial_note=False,
        doc="the run's configuration (one row)",
    ),
    Analysis(
        "breakdown",
        _m("analysis.results_breakdown", "BreakdownResult"),
        (
            Frame("breakdown", "by", _m("analysis.results_breakdown", "BREAKDOWN_SCHEMA")),
            Frame("breakdown_totals", "totals", _m("analysis.results_breakdown", "BREAKDOWN_TOTAL_SCHEMA")),
        ),
        step=4,
        rank=_m(_S, "breakdown_part"),
        merge=_m(_S, "merge_breakdown"),
        added=True,
        table=_m("render.tables", "breakdown_table"),
        table_at=4,
        html=_m("render.report_analyses", "breakdown_section"),
        html_at=2,
        doc="GPU time by kernel category, kernel and launching op",
    ),
    Analysis(
        "flops",
        _m("analysis.flops_results", "FlopsResult"),
        (
            Frame("flops", "per_step", _m("analysis.flops_results", "FLOPS_SCHEMA")),
            Frame("flops_by_op", "by_op", _m("analysis.flops_results", "FLOPS_OP_SCHEMA")),
            Frame("flops_devices", "devices", _m("analysis.flops_results", "FLOPS_DEVICE_SCHEMA")),
        ),
        step=6,
        rank=_m("analysis.flops", "rank_part"),
        merge=_m("analysis.flops", "merge"),
        added=True,
        table=_m("render.flops_table", "flops_table"),
        table_at=8,
        html=_m("render.flops_html", "flops_section"),
        html_at=8,
        doc="achieved FLOP/s and MFU of GEMM, attention and convolution ops (estimates)",
    ),
    Analysis(
        "pipeline",
        _m("analysis.pipeline_results", "PipelineResult"),
        (
            Frame(
                "pipeline_microbatches", "microbatches", _m("analysis.pipeline_results", "PIPELINE_MB_SCHEMA")
            ),
            Frame("pipeline_stages", "stages", _m("analysis.pipeline_results", "PIPELINE_STAGE_SCHEMA")),
        ),
        step=7,
        rank=_m(_S, "pipeline_part"),
        merge=_m(_S, "merge_pipeline"),
        added=True,
        table=_m("render.pipeline_table", "pipeline_table"),
        table_at=9,
        html=_m("render.pipeline_html", "pipeline_section"),
        html_at=9,
        doc="microbatches and bubbles per pipeline stage",
    ),
    Analysis(
        "comm_wait",
        _m("analysis.comm_wait_results", "CommWaitResult"),
        (
            Frame("comm_wait", "ops", _m("analysis.comm_wait_results", "COMM_WAIT_SCHEMA")),
            Frame("comm_wait_by_dim", "by_dim", _m("analysis.comm_wait_results", "COMM_WAIT_DIM_SCHEMA")),
            Frame("comm_wait_by_rank", "by_rank", _m("analysis.comm_wait_results", "COMM_WAIT_RANK_SCHEMA")),
        ),
        step=8,
        rank=_m(_S, "comm_wait_part"),
        merge=_m(_S, "merge_comm_wait"),
        added=True,
        table=_m("render.comm_wait_table", "comm_wait_table"),
        table_at=10,
        html=_m("render.comm_wait_html", "comm_wait_section"),
        html_at=7,
        doc="waiting vs transferring of communication matched across ranks",
    ),
    Analysis(
        "iterations",
        _m("analysis.iterations_results", "IterationsResult"),
        (
            Frame("iterations", "iterations", _m("analysis.iterations_results", "ITERATION_SCHEMA")),
            Frame("phases", "phases", _m("analysis.iterations_results", "PHASE_SCHEMA")),
            Frame("requests", "requests", _m("analysis.iterations_results", "REQUEST_SCHEMA")),
        ),
        step=9,
        rank=_m(_S, "iterations_part"),
        merge=_m(_S, "merge_iterations"),
        added=True,
        partial_note=False,
        table=_m("render.iterations_table", "iterations_table"),
        table_at=11,
        doc="iterations, phases and requests (inference, --step-marker)",
    ),
    Analysis(
        "cpu_wait",
        _m("analysis.cpu_wait_results", "CpuWaitResult"),
        (
            Frame("cpu_wait", "steps", _m("analysis.cpu_wait_results", "CPU_WAIT_SCHEMA")),
            Frame("cpu_wait_idle", "idle", _m("analysis.cpu_wait_results", "CPU_WAIT_IDLE_SCHEMA")),
            Frame("cpu_wait_phases", "phases", _m("analysis.cpu_wait_results", "CPU_WAIT_PHASE_SCHEMA")),
        ),
        step=11,
        merge=_m("analysis.cpu_wait", "merge"),  # the run's scheduler samples with each rank's timeline
        added=True,
        partial_note=False,
        optional=True,
        table=_m("render.cpu_wait_table", "cpu_wait_table"),
        table_at=13,
        html=_m("render.cpu_wait_html", "cpu_wait_section"),
        html_at=7.3,
        doc="the launching thread's scheduler state per step, GPU idle interval and phase (collect --cpu-hz)",
    ),
    Analysis(
        "graph_launches",
        _m("analysis.graph_launch_results", "GraphLaunchResult"),
        (
            Frame("graph_launches", "launches", _m("analysis.graph_launch_results", "GRAPH_LAUNCH_SCHEMA")),
            Frame(
                "graph_launch_kernels", "kernels", _m("analysis.graph_launch_results", "GRAPH_KERNEL_SCHEMA")
            ),
        ),
        step=11,
        rank=_m("analysis.graph_launches", "rank_part"),
        merge=_m("analysis.graph_launches", "merge"),
        added=True,
        partial_note=False,
        optional=True,
        table=_m("render.graph_launch_table", "graph_launch_table"),
        table_at=12,
        doc="CUDA/HIP graph launches and the kernels each started",
    ),
    Analysis(
        "dims",
        _m("analysis.dims_results", "DimsResult"),
        (
            Frame("dims", "dims", _m("analysis.dims_results", "DIMS_SCHEMA")),
            Frame("dim_msg_sizes", "sizes", _m("analysis.dims_results", "DIM_SIZES_SCHEMA")),
        ),
        step=9,  # after overlap, bandwidth, waiting vs transfer and the pipeline: it reads their results
        merge=_m("analysis.dims", "merge"),
        added=True,
        table=_m("render.dims_table", "dims_table"),
        table_at=10.3,
        html=_m("render.dims_html", "dims_section"),
        html_at=7.6,
        doc="every headline figure by parallel dimension; message sizes per dimension",
    ),
    Analysis(
        "phase_power",
        _m("analysis.phase_power_results", "PhasePowerResult"),
        (
            Frame("power_phases", "phases", _m("analysis.phase_power_results", "POWER_PHASE_SCHEMA")),
            Frame(
                "power_excursions", "excursions", _m("analysis.phase_power_results", "POWER_EXCURSION_SCHEMA")
            ),
        ),
        step=8,  # after energy/power, FLOP/s and the pipeline (per rank and merged): it reads them
        rank=_m("analysis.phase_power", "rank_part"),
        merge=_m("analysis.phase_power", "merge"),
        added=True,
        table=_m("render.phase_power_table", "phase_power_table"),
        table_at=10.6,
        html=_m("render.phase_power_html", "phase_power_section"),
        html_at=11.5,
        doc="power per microbatch phase and the peak excursion per step",
    ),
]

#: name -> entry
BY_NAME: dict[str, Analysis] = {a.name: a for a in ANALYSES}


def register(a: Analysis) -> None:
    """Add an analysis (after those above, in machine outputs). One whose name is not a field of
    ``RunAnalysis`` keeps its result in ``RunAnalysis.extra`` (read as ``res.<name>`` all the
    same); every loop over the registry sees it from then on."""
    if a.name in BY_NAME:
        raise ValueError(f"an analysis named {a.name!r} is registered already")
    ANALYSES.append(a)
    BY_NAME[a.name] = a


def unregister(name: str) -> None:
    """Remove the analysis ``name`` (a test's, or a plug-in's)."""
    ANALYSES.remove(BY_NAME.pop(name))


class Live(Mapping[str, Any]):
    """A mapping computed from the registry each time it is read (so that an analysis registered
    later is in it): e.g. ``frame_schemas.FRAME_SCHEMAS``, ``store.results.RESULT_TYPES``."""

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self._build = build

    def __getitem__(self, key: str) -> Any:
        return self._build()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())


@dataclass
class Merge:
    """What a merge function reads: every rank's part (in rank order), the options, the run's
        facts, and ``skipped`` to fill; ``shared`` carries what one merge computes for another
        (idle time's launch statistics, energy's power, the critical path's what-if); ``results`` the
    results of the analyses merged before (in ``step`` order: by-dimension figures read them)."""

    parts: list[Any]
    options: Any
    simulated: bool
    multi: bool
    skipped: dict[str, str]
    manifest: object = None
    graph_step: Callable[..., Any] | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)  # the results merged so far, by name
    cpu_sched: Any = None  # the run's CPU scheduler samples (Run.cpu_sched; the local path only)


def merge_notes(per_rank: list[tuple[int, list[str]]], multi: bool) -> list[str]:
    """Each distinct note once, with the ranks it holds for (``ranks 0-7: ...``; on the 8-rank
    DLRM set the same note was printed once per rank), in order of first appearance."""
    ranks_of: dict[str, dict[int, None]] = {}  # ordered sets: linear in ranks (10,000 ranks: ms, not s)
    for r, notes in per_rank:
        for n in notes:
            ranks_of.setdefault(n, {})[r] = None
    if not multi:
        return list(ranks_of)
    return [
        f"{'ranks' if len(rs) > 1 else 'rank'} {rank_ranges(list(rs))}: {n}" for n, rs in ranks_of.items()
    ]


@cache
def resolve(ref: str) -> Any:
    """The object named ``"module:attribute"`` (a function, a result type, a column table;
    its module loaded on first use)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def in_steps() -> list[Analysis]:
    """The entries in the order they run (per rank and in the merge)."""
    return sorted(ANALYSES, key=lambda a: a.step)


def shown(kind: str) -> list[tuple[Analysis, str]]:
    """``(entry, renderer)`` of the entries with a ``kind`` ("table" | "html") renderer, in the
    order they are shown."""
    found = [(getattr(a, f"{kind}_at"), a, getattr(a, kind)) for a in ANALYSES if getattr(a, kind)]
    return [(a, ref) for _, a, ref in sorted(found, key=lambda x: x[0])]
