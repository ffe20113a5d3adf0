"""Typed results of the analyses.

Every analysis is a pure function of the trace model that returns one of the
dataclasses below. Each holds polars frames whose columns are fixed by the
``*_SCHEMA`` column tables in this module, each declared once, as data, in
``analysis/analyses.toml`` (name, dtype, unit, description; loaded by ``analysis/columns.py``;
renderers, exporters, the HTML report, baseline/check and diff rely on them; the JSON Schema and
docs/columns.md are generated from them). Which result holds which frames: the analysis registry
(``analysis/registry.py``, from the same file); ``frames()`` of a result gives them by name. Times are integer ns, energy J, power W,
bandwidth GB/s with GB = 1e9 bytes. Percentages are 0..100.

Conventions shared by all frames:

- ``rank``: the global rank the row belongs to (null when the trace had none).
- ``step``: the ``ProfilerStep#N`` number, or null for a row covering the whole
  trace (the "total" row).
- ``simulated``: True when the timeline was rebuilt by ``--simulate`` from
  dependencies and durations (the source had no timestamps); every figure of such
  a result is simulated, not measured.

The formulas are in ``docs/analyses.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from charllm_trace.analysis.comm_wait_results import CommWaitResult
from charllm_trace.analysis.config_results import CONFIG_SCHEMA, RunConfig  # noqa: F401 - re-exported
from charllm_trace.analysis.cpu_wait_results import CpuWaitResult
from charllm_trace.analysis.dims_results import DimsResult
from charllm_trace.analysis.flops_results import FlopsResult
from charllm_trace.analysis.frame_build import frame  # noqa: F401 - re-exported (every analysis builds with it)
from charllm_trace.analysis.graph_launch_results import GraphLaunchResult
from charllm_trace.analysis.idle_results import IdleTimeResult, LaunchResult
from charllm_trace.analysis.iterations_results import IterationsResult
from charllm_trace.analysis.phase_power_results import PhasePowerResult
from charllm_trace.analysis.pipeline_results import PipelineResult
from charllm_trace.analysis.registry import ANALYSES
from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.results_breakdown import BreakdownResult
from charllm_trace.analysis.schemas import (  # noqa: F401 - re-exported
    BANDWIDTH_SUMMARY_SCHEMA,
    COLLECTIVE_SCHEMA,
    CRITICAL_OPS_SCHEMA,
    CRITICAL_PATH_SCHEMA,
    CRITICAL_SEGMENT_SCHEMA,
    ENERGY_SCHEMA,
    ENERGY_TOTAL_SCHEMA,
    MATCHED_SCHEMA,
    OVERLAP_GROUP_SCHEMA,
    OVERLAP_SCHEMA,
    POWER_SCHEMA,
    STRAGGLER_SCHEMA,
    THROTTLE_SCHEMA,
)
from charllm_trace.analysis.spread_results import empty_rank_spread
from charllm_trace.analysis.whatif_results import WHATIF_SCHEMA, WhatIfResult  # noqa: F401 - re-exported

# ---------------------------------------------------------------------------
# The words of notes and skip reasons the CLI recognises (render.tables.cli_hint adds its flags);
# here, with the result types, so that drawing saved results imports no analysis
# ---------------------------------------------------------------------------

#: What can be done about a trace without timestamps (the CLI adds its own flag to it).
CAN_SIMULATE = (
    "a simulated timeline can be rebuilt from dependencies and durations "
    "(analysis.simulate; figures then simulated)"
)
NO_TIMESTAMPS = (
    "this trace has no timestamps (e.g. a Chakra ET written by Chakra's own converter, or a host "
    f"execution trace alone): overlap needs them; {CAN_SIMULATE}"
)
SIMULATED_NOTE = (
    "SIMULATED: the source has no timestamps; times were rebuilt from dependencies and durations "
    "(docs/analyses.md, analysis.simulate)"
)
NO_TELEMETRY = "no telemetry in this trace: energy and power not computed"
#: The start of a note that says a figure is probably wrong (printed as a warning, not a note).
WARNING = "WARNING: "
#: The note of a device whose link peak is not known (the CLI names its own option for it).
NO_PEAK = "device model unknown: no link peak, utilisation not computed (a peak can be given: peak_gbps)"
#: The note of per-step figures asked of a trace without steps (the CLI adds how to split it).
NO_STEPS = "per-step figures asked for, but the trace has no steps (no ProfilerStep ranges): whole-trace figures only"

# ---------------------------------------------------------------------------
# Overlap
# ---------------------------------------------------------------------------


@dataclass
class OverlapResult(TimelineResult):
    """Compute/communication overlap per rank and step, per process group and per dimension.

    ``mode`` is ``"gpu"`` (kernels on GPU streams) or ``"cpu"`` (gloo / CPU-only
    traces: communication = CPU collective ops, compute = other leaf CPU ops, see
    docs/analyses.md). ``hta_compat`` records whether HTA's kernel filter was applied.
    """

    per_rank: pl.DataFrame  # OVERLAP_SCHEMA
    per_group: pl.DataFrame  # OVERLAP_GROUP_SCHEMA (pg_name set)
    per_dim: pl.DataFrame  # OVERLAP_GROUP_SCHEMA (pg_name null, dim set)
    mode: str = "gpu"
    hta_compat: bool = False
    rank_spread: pl.DataFrame = field(default_factory=empty_rank_spread)  # RANK_SPREAD_SCHEMA

    def total(self, rank: int | None = None) -> pl.DataFrame:
        """The whole-trace rows (step null), optionally of one rank."""
        df = self.per_rank.filter(pl.col("step").is_null())
        return df if rank is None else df.filter(pl.col("rank") == rank)


# ---------------------------------------------------------------------------
# Bandwidth
# ---------------------------------------------------------------------------


@dataclass
class LinkPeak:
    """The link peak used for utilisation, and where it came from."""

    gbps: float | None  # per direction, GB/s; None when unknown
    link: str  # e.g. "NVLink 4 (H100)", "InfiniBand NDR", "override"
    source: str  # "table" | "override" | "unknown"
    spans_nodes: bool | None = None


@dataclass
class BandwidthResult(TimelineResult):
    collectives: pl.DataFrame  # COLLECTIVE_SCHEMA
    summary: pl.DataFrame  # BANDWIDTH_SUMMARY_SCHEMA
    matched: pl.DataFrame  # MATCHED_SCHEMA (empty with a single rank)
    peaks: dict[str, LinkPeak] = field(default_factory=dict)  # pg_name -> peak used
    stragglers: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STRAGGLER_SCHEMA))


# ---------------------------------------------------------------------------
# Energy
# ---------------------------------------------------------------------------


@dataclass
class EnergyResult(TimelineResult):
    """Energy per operator, split by time share within each telemetry interval.

    ``method`` is ``"trapezoid"`` (power linear between samples) or ``"step"``.
    """

    totals: pl.DataFrame  # ENERGY_TOTAL_SCHEMA
    by: pl.DataFrame  # ENERGY_SCHEMA, all aggregations stacked (filter on "group")
    method: str = "trapezoid"

    def group(self, name: str) -> pl.DataFrame:
        return self.by.filter(pl.col("group") == name)


# ---------------------------------------------------------------------------
# Power and thermal
# ---------------------------------------------------------------------------


@dataclass
class PowerResult(TimelineResult):
    per_step: pl.DataFrame  # POWER_SCHEMA
    throttle: pl.DataFrame  # THROTTLE_SCHEMA


# ---------------------------------------------------------------------------
# Critical path and what-if replay (the execution graph, charllm_trace.graph)
# ---------------------------------------------------------------------------

#: What a critical path spends its time in (columns ``<category>_ns``).
CP_CATEGORIES = ("gpu_compute", "gpu_memory", "communication", "cpu_op", "launch", "sync_wait", "idle")


@dataclass
class CriticalPathResult(TimelineResult):
    """Critical paths through the execution graph (docs/analyses.md, "Critical path")."""

    paths: pl.DataFrame  # CRITICAL_PATH_SCHEMA
    top_ops: pl.DataFrame  # CRITICAL_OPS_SCHEMA
    segments: pl.DataFrame  # CRITICAL_SEGMENT_SCHEMA (empty from ``analyze_run``: see critical_path())


@dataclass(frozen=True)
class AnalyzeOptions:
    """Options of ``analyze_run`` (the CLI's ``analyze`` flags)."""

    per_step: bool = False
    hta_compat: bool = False  # drop kernels launched after the last ProfilerStep begins
    hta_keep_last_step: bool = False  # with hta_compat: keep the last step (HTA's include_last_profiler_step)
    peak_gbps: float | None = None  # override the link peak
    parallel: Mapping[str, int] | None = None  # {"tp": 2, "pp": 2, "dp": 2, "ep": 1}
    simulate: bool = False  # rebuild a timeline for traces without timestamps
    energy_method: str = "trapezoid"  # or "step", "counter" (ENERGY_METHODS)
    critical_path: bool = True  # the critical path through the execution graph
    what_if: Mapping[str, float] | None = None  # class -> duration factor (a what-if replay)
    breakdown_top: int | None = None  # time breakdown: keys kept per (rank, step, group); None: all
    step_marker: str | None = None  # steps: the ranges of this name, not ProfilerSteps (marker_steps)


@dataclass(frozen=True)
class Chained:
    """Pieces of a frame's rows from several sources (each as :attr:`RunAnalysis.spilled`
    gives them), one after the other."""

    sources: tuple[Callable[[], Iterator[pl.DataFrame]], ...]

    def __call__(self) -> Iterator[pl.DataFrame]:
        for source in self.sources:
            yield from source()


@dataclass
class RunAnalysis:
    """The four analyses of a run. An analysis that cannot be computed is None and
    ``skipped[name]`` says why, in one plain sentence."""

    overlap: OverlapResult | None
    bandwidth: BandwidthResult | None
    energy: EnergyResult | None
    power: PowerResult | None
    critical_path: CriticalPathResult | None = None
    what_if: WhatIfResult | None = None
    idle_time: IdleTimeResult | None = None  # GPU idle per stream (analysis/idle_time.py)
    launch: LaunchResult | None = None  # launch delays and queues (analysis/launch_stats.py)
    config: RunConfig | None = None
    breakdown: BreakdownResult | None = None
    flops: FlopsResult | None = None  # achieved FLOP/s and MFU (analysis.flops; estimates)
    pipeline: PipelineResult | None = None  # microbatches and bubbles per stage (analysis.pipeline)
    comm_wait: CommWaitResult | None = None  # waiting vs transferring of matched communication
    iterations: IterationsResult | None = None  # iterations, phases, requests (analysis.iterations)
    cpu_wait: CpuWaitResult | None = None  # the launching thread's scheduler state (analysis.cpu_wait)
    graph_launches: GraphLaunchResult | None = None  # CUDA/HIP graph launches (analysis.graph_launches)
    dims: DimsResult | None = None  # every headline figure by parallel dimension (analysis.dims)
    phase_power: PhasePowerResult | None = (
        None  # power per microbatch phase, excursions (analysis.phase_power)
    )
    skipped: dict[str, str] = field(default_factory=dict)
    ranks: list[int] = field(default_factory=list)
    simulated: bool = False
    source: str | None = None
    options: AnalyzeOptions = field(default_factory=AnalyzeOptions)
    #: the results of registered analyses that have no field here (``analysis/registry.py``),
    #: by name; ``res.<name>`` reads them as it reads a field
    extra: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        extra = self.__dict__.get("extra")
        if extra is not None and name in extra:
            return extra[name]
        raise AttributeError(f"'RunAnalysis' object has no attribute {name!r}")

    def __post_init__(self) -> None:
        #: The classified nodes of each analysed rank (``classify``, plus ``phase`` where energy
        #: was computed), as ``analyze_run`` gave them to the analyses: the report draws from them
        #: instead of classifying again. An input of the analyses, not a result: not a dataclass
        #: field (not compared, exported or copied by ``dataclasses.replace``).
        self.classified: dict[int, pl.DataFrame] = {}
        #: Frames whose rows are not held here (``analysis/rank_rows.py``: the Dask engine's
        #: workers wrote them to files): frame name -> a function giving its rows a piece at a
        #: time, in order; the frame itself is then empty. The machine formats' writers stream
        #: them (``render/export.py``); :meth:`with_rows` loads them. Not a dataclass field.
        self.spilled: dict[str, Callable[[], Iterator[pl.DataFrame]]] = {}

    def frame_pieces(self, name: str, held: pl.DataFrame) -> Iterator[pl.DataFrame]:
        """The rows of the frame ``name`` (``held``: as :meth:`frames` gives it) a piece at a
        time: its spilled pieces read back, if any, then the frame itself (the rows held here:
        the time breakdown's all-ranks rows come after the ranks' own)."""
        more = self.spilled.get(name)
        if more is not None:
            yield from more()
        yield held

    def move_rows(self, name: str, more: Callable[[], Iterator[pl.DataFrame]]) -> None:
        """The rows this result holds of the frame ``name`` now given by ``more`` (as
        :attr:`spilled` gives them: they were written elsewhere), after the frame's spilled pieces
        if it had any; the frame held is left empty, its columns kept."""
        held = self.frames()[name]
        self._put(name, held.clear())
        if self.frames()[name].height:  # a frame its result derives (not set): held, not moved
            raise ValueError(f"the frame {name!r} cannot be emptied: its rows stay held")
        before = self.spilled.get(name)
        self.spilled[name] = more if before is None else Chained((before, more))

    def with_rows(self) -> RunAnalysis:
        """This result with its spilled frames' rows loaded into it (itself when none is)."""
        if not self.spilled:
            return self
        frames = self.frames()
        for name in list(self.spilled):
            whole = pl.concat(list(self.frame_pieces(name, frames[name])), how="vertical")
            self._put(name, whole)
        self.spilled = {}
        return self

    def _put(self, name: str, df: pl.DataFrame) -> None:
        """Set the frame ``name`` (a registry frame name) to ``df``."""
        for a in ANALYSES:
            for f in a.frames:
                if f.name == name and a.get(self) is not None:
                    setattr(a.get(self), f.attr, df)

    def frames(self) -> dict[str, pl.DataFrame]:
        """Every frame of the result, by a stable name (used by the exporters): the registry's
        frames of each analysis computed, in its order."""
        out: dict[str, pl.DataFrame] = {}
        for a in ANALYSES:
            r = a.get(self)
            if r is not None:
                out.update(a.frames_of(r))
        return out

    def notes(self) -> dict[str, list[str]]:
        """Each computed analysis' notes (those with some), in the registry's order."""
        out: dict[str, list[str]] = {}
        for a in ANALYSES:
            r: Any = a.get(self)
            if r is not None and r.notes:
                out[a.name] = list(r.notes)
        return out
