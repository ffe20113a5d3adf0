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
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.bandwidth import bandwidth_from, collectives
from charllm_trace.analysis.bandwidth_reason import comm_facts, no_bandwidth_reason
from charllm_trace.analysis.breakdown import RankBreakdown, breakdown_from, rank_breakdown
from charllm_trace.analysis.classify import classify
from charllm_trace.analysis.comm_wait import NO_MATCH, comm_wait_from, rank_comm_ops
from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.energy import energy
from charllm_trace.analysis.flops import flops_from, rank_flops
from charllm_trace.analysis.flops_results import FlopsResult
from charllm_trace.analysis.group_size import Tally
from charllm_trace.analysis.iterations import iterations_from, rank_iterations
from charllm_trace.analysis.iterations_results import IterationsResult
from charllm_trace.analysis.launch_gap import lost_device_activity
from charllm_trace.analysis.marker_steps import with_marker_steps
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.pipeline import NO_LABELS, pipeline_from, rank_microbatches
from charllm_trace.analysis.power import power
from charllm_trace.analysis.rank_spread import rank_spread
from charllm_trace.analysis.results import (
    NO_STEPS,
    NO_TELEMETRY,
    NO_TIMESTAMPS,
    SIMULATED_NOTE,
    AnalyzeOptions,
    BandwidthResult,
    CriticalPathResult,
    EnergyResult,
    LinkPeak,
    OverlapResult,
    PowerResult,
    RunAnalysis,
    WhatIfResult,
)
from charllm_trace.analysis.results_breakdown import NO_GPU_OPS
from charllm_trace.analysis.runconfig import run_config_of
from charllm_trace.analysis.stream_analyses import RankStreams, rank_stream_analyses, stream_analyses_from
from charllm_trace.analysis.telemetry_source import telemetry_source_note
from charllm_trace.analysis.whatif import simulate
from charllm_trace.model import Trace, TraceMeta, rank_ranges

#: Why a trace without timestamps or durations is not simulated.
NO_DURATIONS = (
    "this trace records neither times nor durations (a host execution trace alone): a simulated "
    "timeline would be all zero; convert it together with its Kineto profile"
)

#: (skipped, no_ts ranks, simulated) -> (critical path, what-if): the graph analyses, which
#: need every rank's graph at once
GraphStep = Callable[[dict[str, str], list[int], bool], tuple[CriticalPathResult | None, WhatIfResult | None]]


@dataclass
class RankPart:
    """What one rank contributes to a run's analysis (small: no node tables unless kept)."""

    rank: int
    no_ts: bool = False  # no timestamps (and not simulated)
    no_dur: bool = False  # neither timestamps nor durations
    simulated: bool = False  # this rank's timeline was rebuilt here
    meta_simulated: bool = False  # the trace says it is simulated (bandwidth's flag)
    overlap: OverlapResult | None = None
    coll: pl.DataFrame | None = None  # COLLECTIVE_SCHEMA rows
    peaks: dict[str, LinkPeak] = field(default_factory=dict)
    n_comm: int = 0
    comm_timed: int = 0  # of them, with a duration (read with n_comm, for the skipped reason)
    comm_names: Counter[str] = field(default_factory=Counter)
    device: bool = False  # the rank has device activity
    energy: EnergyResult | None = None
    power: PowerResult | None = None
    tel_rows: int = 0
    tel_cols: list[str] = field(default_factory=list)  # telemetry columns holding some value
    dup_notes: list[str] = field(default_factory=list)
    tally: Tally = field(default_factory=dict)  # group sizes taken from the collectives' tensors
    streams: RankStreams = None  # idle time per stream and launch statistics (timed ranks)
    breakdown: RankBreakdown | None = None
    flops: tuple[int, FlopsResult] | None = None
    iterations: IterationsResult | None = None  # iterations, phases, requests (analysis/iterations.py)
    lost: str | None = None  # the profile lost its device activity
    pipe: pl.DataFrame | None = None  # labelled microbatch spans (analysis/pipeline.py)
    pipe_notes: list[str] = field(default_factory=list)
    comm_ops: pl.DataFrame | None = None  # communication ops to match across ranks (analysis/comm_wait.py)
    comm_notes: list[str] = field(default_factory=list)
    meta: TraceMeta | None = None  # the rank's metadata, without process groups or extras (run_config)
    # kept by the local path only (the report's views and the execution graph need them)
    trace: Trace | None = None
    recorded: pl.DataFrame | None = None
    classified: pl.DataFrame | None = None


def layout_of(manifest: object, options: AnalyzeOptions) -> dict[str, int] | None:
    """The parallel layout the analysis uses: ``options.parallel``, else the manifest's ``parallel``."""
    if options.parallel:
        return dict(options.parallel)
    lay = manifest.get("parallel") if isinstance(manifest, dict) else None
    if isinstance(lay, dict):
        try:
            return {
                str(k).lower(): int(v)
                for k, v in lay.items()
                if str(k).lower() in ("tp", "pp", "dp", "ep", "cp")
            }
        except (TypeError, ValueError):
            return None
    return None


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
    """One rank's part of ``analyze_run``. ``dims``: process group -> dimension (of the whole
    run); ``hosts``: every rank's host; ``node_gpus``: the run's GPUs per node, when known.
    ``keep``: also keep the (simulated) trace and its classified table (the local path's report
    views and execution graph use them)."""
    part = RankPart(rank=rank)
    marker_notes: list[str] = []
    if options.step_marker and trace.meta.has_timestamps:  # steps: the marker's ranges
        trace, marker_notes = with_marker_steps(trace, options.step_marker)
    tr = trace
    if not tr.meta.has_timestamps:
        if options.simulate and not has_durations(tr):
            part.no_dur = part.no_ts = True  # nothing to simulate from: every time would be 0
        elif options.simulate:
            tr = simulate(tr)
            part.simulated = True
        else:
            part.no_ts = True
    # classified once (the classes do not depend on times: a simulated copy takes its original's);
    # the context cuts the step windows once, on first use (analysis/context.py)
    recorded = classify(trace.nodes)
    classified = recorded if tr is trace else tr.nodes.with_columns(recorded["cls"])
    ctx = RankContext(tr, classified, recorded, rank, dims, hosts, node_gpus)
    if not part.no_ts:
        part.overlap = overlap(
            ctx,
            per_step=options.per_step,
            hta_compat=options.hta_compat,
            hta_keep_last_step=options.hta_keep_last_step,
            group_dims=dims,
        )
        part.streams = rank_stream_analyses(ctx, options)
    part.meta_simulated = bool(tr.meta.extra.get("simulated"))
    part.coll, part.peaks = collectives(
        ctx, peak_gbps=options.peak_gbps, group_dims=dims, hosts=hosts, tally=part.tally, node_gpus=node_gpus
    )
    if part.coll.height == 0:  # only read when no rank has a timed collective (the skipped reason)
        part.n_comm, part.comm_timed, part.comm_names, part.device = comm_facts(tr)
    tel = tr.telemetry
    part.tel_rows = tel.height
    part.tel_cols = [
        c
        for c in tel.columns
        if c.endswith(("_w", "_c", "_mhz", "_pct")) and tel[c].null_count() < tel.height
    ]
    if tel.height and not tel["power_w"].is_null().all():
        part.energy = energy(ctx, method=options.energy_method, per_step=options.per_step)
        part.power = power(ctx, per_step=options.per_step)
        src = telemetry_source_note(tr)  # an imported log: its tool, file and rate
        if src:
            part.energy.notes.insert(0, src)
            part.power.notes.insert(0, src)
    # time breakdown (durations suffice: without timestamps, the whole trace only)
    part.breakdown = rank_breakdown(
        rank,
        ctx,
        per_step=options.per_step,
        hta_compat=options.hta_compat,
        hta_keep_last_step=options.hta_keep_last_step,
    )
    part.flops = rank_flops(rank, ctx, per_step=options.per_step)
    if not part.no_ts:  # with --step-marker, or where phases or requests are marked
        part.iterations = rank_iterations(rank, tr, ctx.classified, ctx.windows, bool(options.step_marker))
    if part.iterations is not None:
        part.iterations.notes[:0] = marker_notes
    part.lost = lost_device_activity(tr.nodes)
    part.pipe, part.pipe_notes = rank_microbatches(rank, tr, dims)
    part.comm_ops, part.comm_notes = rank_comm_ops(rank, tr, dims)
    part.meta = dataclasses.replace(tr.meta, process_groups=(), extra={})
    part.dup_notes = duplicate_step_notes(tr)
    if options.per_step and not part.no_ts and tr.steps().height == 0:
        part.dup_notes.append(NO_STEPS)
    if keep:
        part.trace, part.recorded, part.classified = tr, recorded, ctx.classified
    return part


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


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


def _merge_overlap(
    parts: list[RankPart], options: AnalyzeOptions, simulated: bool, multi: bool
) -> OverlapResult | None:
    ov_parts = [p for p in parts if p.overlap is not None]
    if not ov_parts:
        return None
    ovs = [p.overlap for p in ov_parts if p.overlap is not None]
    ov = OverlapResult(
        per_rank=_concat([o.per_rank for o in ovs]),
        per_group=_concat([o.per_group for o in ovs]),
        per_dim=_concat([o.per_dim for o in ovs]),
        mode=ovs[0].mode if len({o.mode for o in ovs}) == 1 else "mixed",
        hta_compat=options.hta_compat,
        simulated=simulated,
        notes=merge_notes([(p.rank, o.notes) for p, o in zip(ov_parts, ovs, strict=True)], multi),
    )
    ov.rank_spread = rank_spread(ov.per_rank, ov.per_dim)  # per dimension, over the ranks
    no_ts = [p.rank for p in parts if p.no_ts]
    if no_ts:
        ov.notes.append(f"ranks {no_ts}: {NO_TIMESTAMPS}")
    if simulated:
        ov.notes.insert(0, SIMULATED_NOTE)
    return ov


def _merge_bandwidth(
    parts: list[RankPart], simulated: bool, skipped: dict[str, str]
) -> BandwidthResult | None:
    peaks: dict[str, LinkPeak] = {}
    for p in parts:
        peaks.update(p.peaks)
    frames = [p.coll for p in parts if p.coll is not None]
    tally: Tally = {}
    for p in parts:  # summed over ranks
        for k, v in p.tally.items():
            tally[k] = tally.get(k, 0) + v
    bw = bandwidth_from(frames, peaks, simulated=any(p.meta_simulated for p in parts), tally=tally)
    if bw.collectives.height == 0:
        skipped["bandwidth"] = no_bandwidth_reason(
            sum(p.n_comm for p in parts),
            sum(p.comm_timed for p in parts),
            sum((p.comm_names for p in parts), Counter()),
            any(p.device for p in parts),
        )
        return None
    if simulated:
        bw.notes.insert(0, "durations are recorded ones; start times (steps, skews) are simulated")
    if any(p.no_ts for p in parts):
        bw.notes.append("no timestamps: steps and cross-rank arrival skew not available")
    return bw


def _merge_energy(
    parts: list[RankPart], options: AnalyzeOptions, simulated: bool, multi: bool, skipped: dict[str, str]
) -> tuple[EnergyResult | None, PowerResult | None]:
    en_parts = [p for p in parts if p.energy is not None and p.power is not None]
    if en_parts:
        en = EnergyResult(
            totals=_concat([p.energy.totals for p in en_parts if p.energy is not None]),
            by=_concat([p.energy.by for p in en_parts if p.energy is not None]),
            method=options.energy_method,
            simulated=simulated,
            notes=merge_notes([(p.rank, p.energy.notes) for p in en_parts if p.energy is not None], multi),
        )
        pw = PowerResult(
            per_step=_concat([p.power.per_step for p in en_parts if p.power is not None]),
            throttle=_concat([p.power.throttle for p in en_parts if p.power is not None]),
            simulated=simulated,
            notes=merge_notes([(p.rank, p.power.notes) for p in en_parts if p.power is not None], multi),
        )
        missing = [p.rank for p in parts if p.energy is None]
        if missing:
            en.notes.append(f"ranks {missing}: no telemetry")
        return en, pw
    reason = NO_TELEMETRY
    n_tel = sum(p.tel_rows for p in parts)
    if n_tel:  # samples without power (a CPU-only run: temperatures or clocks only)
        cols = sorted({c for p in parts for c in p.tel_cols})
        reason = (
            f"{n_tel:,} telemetry samples, but none has a power reading"
            + (f" (they hold {', '.join(cols)})" if cols else "")
            + ": energy and power not computed"
        )
    if simulated:
        reason = "simulated timeline: telemetry cannot be joined to it; energy and power not computed"
    skipped["energy"] = reason
    skipped["power"] = reason
    return None, None


def merge_parts(
    parts: list[RankPart],
    options: AnalyzeOptions,
    *,
    manifest: object,
    source: str | None,
    graph_step: GraphStep,
) -> RunAnalysis:
    """The run's analysis from every rank's part (in rank order). ``graph_step`` adds the
    critical path and what-if (or says in ``skipped`` why not)."""
    skipped: dict[str, str] = {}
    multi = len(parts) > 1
    simulated = any(p.simulated for p in parts)
    no_ts = [p.rank for p in parts if p.no_ts]
    no_dur = [p.rank for p in parts if p.no_dur]
    ov = _merge_overlap(parts, options, simulated, multi)
    if ov is None:
        skipped["overlap"] = (
            NO_DURATIONS
            if no_dur and len(no_dur) == len(no_ts)
            else NO_TIMESTAMPS
            if no_ts
            else "no trace to analyse"
        )
    # idle time per GPU stream and launch statistics (timed ranks)
    timed = [(p.rank, p.streams) for p in parts if not p.no_ts]
    idle, launch, why = stream_analyses_from(timed, options, simulated=simulated)
    if why is not None:
        no_ts_why = NO_TIMESTAMPS.replace("overlap needs them", "idle time per stream and launches need them")
        skipped["idle_time"] = skipped["launch"] = no_ts_why if not timed else why
    bw = _merge_bandwidth(parts, simulated, skipped)
    en, pw = _merge_energy(parts, options, simulated, multi, skipped)
    bd = breakdown_from([p.breakdown for p in parts if p.breakdown is not None], top_n=options.breakdown_top)
    if bd is None:
        skipped["breakdown"] = NO_GPU_OPS
    cp, wi = graph_step(skipped, no_ts, simulated)
    fl, fl_notes = flops_from(
        [p.flops for p in parts if p.flops is not None], simulated=simulated, skipped=skipped
    )
    if fl is not None:
        fl.notes = merge_notes(fl_notes, multi)
    pipe = pipeline_from(
        [p.pipe for p in parts if p.pipe is not None],
        merge_notes([(p.rank, p.pipe_notes) for p in parts], multi),
        simulated=simulated,
    )
    if pipe is None:
        skipped["pipeline"] = NO_LABELS
    cw = comm_wait_from(
        [p.comm_ops for p in parts if p.comm_ops is not None],
        merge_notes([(p.rank, p.comm_notes) for p in parts], multi),
        simulated=simulated,
    )
    if cw is None:
        skipped["comm_wait"] = NO_MATCH
    if no_dur and len(no_dur) == len(no_ts):
        for k in ("critical_path", "what_if"):
            if k in skipped:
                skipped[k] = NO_DURATIONS
    # a profile that lost its device activity: said first, in the first result shown
    lost = [(p.rank, [p.lost]) for p in parts if p.lost is not None]
    shown = next((x for x in (ov, bw) if x is not None), None)
    if lost and shown is not None:
        shown.notes[:0] = merge_notes(lost, multi)
    its = [(p.rank, p.iterations) for p in parts if p.iterations is not None]
    res = RunAnalysis(
        overlap=ov,
        critical_path=cp,
        what_if=wi,
        idle_time=idle,
        launch=launch,
        config=run_config_of(
            manifest, [p.meta for p in parts if p.meta is not None], layout_of(manifest, options)
        ),
        breakdown=bd,
        flops=fl,
        pipeline=pipe,
        comm_wait=cw,
        iterations=iterations_from(its, merge_notes([(r, i.notes) for r, i in its], multi)),
        bandwidth=bw,
        energy=en,
        power=pw,
        skipped=skipped,
        ranks=[p.rank for p in parts],
        simulated=simulated,
        source=source,
        options=options,
    )
    dup = merge_notes([(p.rank, p.dup_notes) for p in parts], multi)
    target = next((x for x in (ov, pw, bw, en) if x is not None), None)
    if dup and target is not None:  # reported, not dropped silently (the first of each is used)
        target.notes.extend(dup)
    partial = manifest.get("partial") if isinstance(manifest, dict) else None
    if isinstance(partial, str):  # --allow-partial: every result says it covers part of the run
        for r in (ov, bw, en, pw, idle, launch, bd, fl, pipe, cw):
            if r is not None:
                r.notes.insert(0, partial)
    return res
