"""Typed results of the analyses.

Every analysis is a pure function of the trace model that returns one of the
dataclasses below. Each holds polars frames whose columns are fixed by the
``*_SCHEMA`` column tables in this module, each declared once as a list of
``Col(name, dtype, unit, doc)`` (``analysis/columns.py``; renderers, exporters, the
HTML report, baseline/check and diff rely on them; the JSON Schema and docs/columns.md
are generated from them). Which result holds which frames: the analysis registry
(``analysis/registry.py``). Times are integer ns, energy J, power W,
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

from charllm_trace.analysis.columns import Col, Columns, columns
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
from charllm_trace.analysis.results_breakdown import BreakdownResult
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

#: One row per (rank, step); the step-null row covers the whole trace.
OVERLAP_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("start_ns", pl.Int64, "ns", "window analysed"),
    Col("end_ns", pl.Int64, "ns"),
    Col("span_ns", pl.Int64, "ns", "end_ns - start_ns"),
    Col("compute_ns", pl.Int64, "ns", "|union of compute intervals|"),
    Col("comm_ns", pl.Int64, "ns", "|union of communication intervals|"),
    Col("overlap_ns", pl.Int64, "ns", "|comm ∩ compute|"),
    Col("exposed_comm_ns", pl.Int64, "ns", "comm_ns - overlap_ns"),
    Col("memory_ns", pl.Int64, "ns", "|union of memcpy/memset intervals| (neither comm nor compute)"),
    Col("busy_ns", pl.Int64, "ns", "|union of all GPU (or CPU-op, in CPU mode) activity|"),
    Col("idle_ns", pl.Int64, "ns", "span_ns - busy_ns"),
    Col("overlap_pct", pl.Float64, "%", "100 * overlap_ns / comm_ns; null when comm_ns == 0"),
    Col("n_compute", pl.Int64, "", "intervals counted"),
    Col("n_comm", pl.Int64),
    Col("cut", pl.Boolean, "", "the step is cut by the trace's end: left out of step means (step_cuts)"),
)

#: Same measures per process group / parallelism dimension: communication of that
#: group only, against all compute of the rank.
OVERLAP_GROUP_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("pg_name", pl.String, "", "null in the per-dimension frame"),
    Col("pg_desc", pl.String),
    Col("dim", pl.String, "", '"tp" | "pp" | "dp" | "ep" | "cp" | null when it cannot be named'),
    Col("comm_ns", pl.Int64, "ns"),
    Col("overlap_ns", pl.Int64, "ns"),
    Col("exposed_comm_ns", pl.Int64, "ns"),
    Col("overlap_pct", pl.Float64, "%"),
    Col("n_comm", pl.Int64),
)


@dataclass
class OverlapResult:
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
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
    rank_spread: pl.DataFrame = field(default_factory=empty_rank_spread)  # RANK_SPREAD_SCHEMA

    def total(self, rank: int | None = None) -> pl.DataFrame:
        """The whole-trace rows (step null), optionally of one rank."""
        df = self.per_rank.filter(pl.col("step").is_null())
        return df if rank is None else df.filter(pl.col("rank") == rank)


# ---------------------------------------------------------------------------
# Bandwidth
# ---------------------------------------------------------------------------

#: One row per collective instance on one rank.
COLLECTIVE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("id", pl.Int64, "", "node id within the rank"),
    Col("name", pl.String),
    Col("coll_type", pl.String),
    Col("pg_name", pl.String),
    Col("pg_desc", pl.String),
    Col("dim", pl.String),
    Col("coll_seq", pl.Int64),
    Col("group_size", pl.Int64, "", "n in the bus factor"),
    Col("step", pl.Int64),
    Col("start_ns", pl.Int64, "ns"),
    Col("dur_ns", pl.Int64, "ns"),
    Col("bytes", pl.Int64, "B", "nccl-tests message size"),
    Col("size_bucket", pl.String, "", '[4^k, 4^(k+1)) bytes, binary units, e.g. "1MiB-4MiB"'),
    Col("algbw_gbps", pl.Float64, "GB/s", "bytes / dur"),
    Col("bus_factor", pl.Float64),
    Col("busbw_gbps", pl.Float64, "GB/s", "algbw * bus_factor"),
    Col("peak_gbps", pl.Float64, "GB/s", "link peak (per direction) used for utilisation"),
    Col("util_pct", pl.Float64, "%", "100 * busbw / peak"),
)

#: Aggregates by (coll_type, pg_name, size_bucket).
BANDWIDTH_SUMMARY_SCHEMA: Columns = columns(
    Col("coll_type", pl.String),
    Col("pg_name", pl.String),
    Col("dim", pl.String),
    Col("size_bucket", pl.String),
    Col("count", pl.Int64),
    Col("bytes_total", pl.Int64, "B"),
    Col("dur_ns_total", pl.Int64),
    Col("algbw_time_weighted_gbps", pl.Float64, "GB/s", "bytes_total / dur_ns_total"),
    Col("busbw_time_weighted_gbps", pl.Float64, "GB/s", "sum(bytes*factor) / dur_ns_total"),
    Col("busbw_max_gbps", pl.Float64, "GB/s", "the fastest instance's busbw"),
    Col("peak_gbps", pl.Float64, "GB/s"),
    Col("util_pct", pl.Float64, "%", "100 * busbw_time_weighted_gbps / peak_gbps"),
)

#: One row per collective matched across ranks by (pg_name, coll_seq).
MATCHED_SCHEMA: Columns = columns(
    Col("pg_name", pl.String),
    Col("coll_seq", pl.Int64),
    Col("coll_type", pl.String),
    Col("bytes", pl.Int64, "B"),
    Col("group_size", pl.Int64),
    Col("n_ranks", pl.Int64, "", "ranks of the group present in the input"),
    Col("dur_min_ns", pl.Int64, "ns", "duration free of waiting for late ranks"),
    Col("dur_max_ns", pl.Int64, "ns"),
    Col("busbw_gbps", pl.Float64, "GB/s", "from dur_min_ns"),
    Col("first_start_ns", pl.Int64, "ns"),
    Col("last_start_ns", pl.Int64, "ns"),
    Col("skew_ns", pl.Int64, "ns", "last_start_ns - first_start_ns (arrival skew)"),
    Col("late_rank", pl.Int64, "", "the rank that started last"),
)


@dataclass
class LinkPeak:
    """The link peak used for utilisation, and where it came from."""

    gbps: float | None  # per direction, GB/s; None when unknown
    link: str  # e.g. "NVLink 4 (H100)", "InfiniBand NDR", "override"
    source: str  # "table" | "override" | "unknown"
    spans_nodes: bool | None = None


#: One row per (process group, rank) over the collectives matched across ranks: how often and
#: how late the rank arrived (lateness = its start - the group's first start).
STRAGGLER_SCHEMA: Columns = columns(
    Col("pg_name", pl.String),
    Col("dim", pl.String),
    Col("rank", pl.Int64),
    Col("n_matched", pl.Int64, "", "collectives of this group matched on this rank"),
    Col("n_last", pl.Int64, "", "of which the rank started last"),
    Col("last_pct", pl.Float64, "%", "100 * n_last / n_matched"),
    Col("mean_late_ns", pl.Float64, "ns", "mean lateness over its matched collectives"),
    Col("max_late_ns", pl.Int64, "ns", "worst lateness"),
)


@dataclass
class BandwidthResult:
    collectives: pl.DataFrame  # COLLECTIVE_SCHEMA
    summary: pl.DataFrame  # BANDWIDTH_SUMMARY_SCHEMA
    matched: pl.DataFrame  # MATCHED_SCHEMA (empty with a single rank)
    peaks: dict[str, LinkPeak] = field(default_factory=dict)  # pg_name -> peak used
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
    stragglers: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STRAGGLER_SCHEMA))


# ---------------------------------------------------------------------------
# Energy
# ---------------------------------------------------------------------------

#: Energy attributed to one key (a kernel name, a launching op, a collective type,
#: a step or a phase). ``key`` is the name; ``group`` says which aggregation.
ENERGY_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("group", pl.String, "", '"kernel" | "op" | "coll_type" | "step" | "phase"'),
    Col("key", pl.String),
    Col("count", pl.Int64, "", "GPU operators in this key"),
    Col("busy_ns", pl.Int64, "ns", "summed operator time inside the telemetry window"),
    Col("energy_j", pl.Float64, "J", "after the counter correction, if any"),
    Col("share_pct", pl.Float64, "%", "of the window's total device energy"),
    Col("short_pct", pl.Float64, "%", "% of busy_ns from operators shorter than the sensor period"),
)

#: One row per (rank, device): totals and the counter reconciliation.
ENERGY_TOTAL_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("device", pl.Int64),
    Col("start_ns", pl.Int64, "ns", "telemetry window"),
    Col("end_ns", pl.Int64, "ns"),
    Col("n_samples", pl.Int64),
    Col("sensor_period_ns", pl.Int64, "ns", "median gap between power samples"),
    Col("integral_j", pl.Float64, "J", "∫ power dt over the window (method below)"),
    Col("counter_j", pl.Float64, "J", "energy counter difference; null when not recorded"),
    Col("correction", pl.Float64, "", "counter_j / integral_j (1.0 when no counter)"),
    Col("total_j", pl.Float64, "J", "integral_j * correction"),
    Col("operators_j", pl.Float64, "J", "energy attributed to operators"),
    Col("idle_j", pl.Float64, "J", "the rest"),
    Col(
        "short_kernel_pct", pl.Float64, "%", "% of operator time in operators shorter than the sensor period"
    ),
)


@dataclass
class EnergyResult:
    """Energy per operator, split by time share within each telemetry interval.

    ``method`` is ``"trapezoid"`` (power linear between samples) or ``"step"``.
    """

    totals: pl.DataFrame  # ENERGY_TOTAL_SCHEMA
    by: pl.DataFrame  # ENERGY_SCHEMA, all aggregations stacked (filter on "group")
    method: str = "trapezoid"
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def group(self, name: str) -> pl.DataFrame:
        return self.by.filter(pl.col("group") == name)


# ---------------------------------------------------------------------------
# Power and thermal
# ---------------------------------------------------------------------------

#: One row per (rank, device, step); the step-null row covers the whole telemetry window.
POWER_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("device", pl.Int64),
    Col("step", pl.Int64),
    Col("start_ns", pl.Int64, "ns"),
    Col("end_ns", pl.Int64, "ns"),
    Col("n_samples", pl.Int64),
    Col("avg_w", pl.Float64, "W", "time-weighted (trapezoid) mean"),
    Col("peak_w", pl.Float64, "W"),
    Col("min_w", pl.Float64, "W"),
    Col(
        "swing_w", pl.Float64, "W", "largest |ΔP| between a sample and a later one within the step, see docs"
    ),
    Col("swing_rate_w_per_s", pl.Float64, "W/s", "largest |ΔP|/Δt between consecutive samples"),
    Col("power_limit_w", pl.Float64, "W"),
    Col("above_limit_ns", pl.Int64, "ns", "time with power_w >= power_limit_w (step hold)"),
    Col("temp_start_c", pl.Float64, "°C"),
    Col("temp_end_c", pl.Float64, "°C"),
    Col("temp_max_c", pl.Float64, "°C"),
    Col("temp_rise_c", pl.Float64, "°C", "temp_end - temp_start"),
    Col("sm_clock_avg_mhz", pl.Float64, "MHz"),
    Col("sm_clock_max_mhz", pl.Float64, "MHz", "highest SM clock seen on this device in the whole trace"),
    Col("sm_clock_ratio", pl.Float64, "", "avg / max"),
    Col("throttled_ns", pl.Int64, "ns", "time with any throttle reason other than idle / app clocks"),
    Col("outlier", pl.Boolean, "", "peak power or throttling stands out (see docs)"),
    Col("outlier_reason", pl.String),
)

#: Time in each throttle reason per (rank, device, step).
THROTTLE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("device", pl.Int64),
    Col("step", pl.Int64),
    Col("reason", pl.String, "", "a name from power.THROTTLE_REASONS"),
    Col("time_ns", pl.Int64, "ns"),
)


@dataclass
class PowerResult:
    per_step: pl.DataFrame  # POWER_SCHEMA
    throttle: pl.DataFrame  # THROTTLE_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------
# Critical path and what-if replay (the execution graph, charllm_trace.graph)
# ---------------------------------------------------------------------------

#: What a critical path spends its time in (columns ``<category>_ns``).
CP_CATEGORIES = ("gpu_compute", "gpu_memory", "communication", "cpu_op", "launch", "sync_wait", "idle")

#: One row per (scope, rank, step). ``scope`` "rank": the path that ends at this rank's last
#: point of the step (it may cross to other ranks through collectives); "job": the path that
#: ends at the last point of the whole run (rank null; step null).
CRITICAL_PATH_SCHEMA: Columns = columns(
    Col("scope", pl.String),
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("start_ns", pl.Int64, "ns", "window: the step's start (or the trace's first point) ..."),
    Col("end_ns", pl.Int64, "ns", "... to its last point (the path's end)"),
    Col("span_ns", pl.Int64, "ns", "end_ns - start_ns: the measured span of the step"),
    Col("length_ns", pl.Int64, "ns", "the critical path's length (= span when it reaches back to the start)"),
    *(Col(f"{c}_ns", pl.Int64, "ns") for c in CP_CATEGORIES),
    Col("n_segments", pl.Int64, "", "pieces of the path that take time (rows of its segments)"),
    Col("ranks_on_path", pl.String, "", 'e.g. "0,1": ranks whose points the path visits'),
)

#: Operators on the path: time each (name, category) contributes, per (scope, rank, step).
CRITICAL_OPS_SCHEMA: Columns = columns(
    Col("scope", pl.String),
    Col("rank", pl.Int64),
    Col("step", pl.Int64),
    Col("name", pl.String),
    Col("category", pl.String),
    Col("time_ns", pl.Int64, "ns"),
    Col("pct", pl.Float64, "", "of the path's length"),
    Col("count", pl.Int64, "", "pieces of the path (that take time) belonging to this op"),
)

#: The path's segments, for timelines (Perfetto, the report): one row per path edge with time.
CRITICAL_SEGMENT_SCHEMA: Columns = columns(
    Col("scope", pl.String),
    Col("rank", pl.Int64, "", "the path's rank (null for the job path)"),
    Col("step", pl.Int64),
    Col("seg_rank", pl.Int64, "", "rank where the segment's time is spent"),
    Col("node_id", pl.Int64, "", "the node whose time it is (null: a wait or idle gap)"),
    Col("name", pl.String),
    Col("category", pl.String),
    Col("start_ns", pl.Int64, "ns"),
    Col("end_ns", pl.Int64, "ns"),
)


@dataclass
class CriticalPathResult:
    """Critical paths through the execution graph (docs/analyses.md, "Critical path")."""

    paths: pl.DataFrame  # CRITICAL_PATH_SCHEMA
    top_ops: pl.DataFrame  # CRITICAL_OPS_SCHEMA
    segments: pl.DataFrame  # CRITICAL_SEGMENT_SCHEMA (empty from ``analyze_run``: see critical_path())
    simulated: bool = False
    notes: list[str] = field(default_factory=list)


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
