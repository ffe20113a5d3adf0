"""The per-rank functions and merges of the registered analyses (``analysis/registry.py``).

Each ``*_part(ctx, options)`` is what one rank gives (a Dask worker computes it and sends it, no
node tables); each ``merge_*(m)`` the run's result from every rank's part (``m.parts``, in rank
order), setting ``m.skipped[name]`` when there is none. ``analysis/rank_parts.py`` runs them in
the registry's order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from charllm_trace.analysis.bandwidth import bandwidth_from, collectives
from charllm_trace.analysis.bandwidth_reason import comm_facts, no_bandwidth_reason
from charllm_trace.analysis.breakdown import RankBreakdown, breakdown_from, rank_breakdown
from charllm_trace.analysis.comm_wait import NO_MATCH, comm_wait_from, rank_comm_ops
from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.energy import energy
from charllm_trace.analysis.group_size import Tally
from charllm_trace.analysis.iterations import iterations_from, rank_iterations
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.pipeline import NO_LABELS, pipeline_from, rank_microbatches
from charllm_trace.analysis.power import power
from charllm_trace.analysis.rank_spread import rank_spread
from charllm_trace.analysis.registry import Merge, merge_notes
from charllm_trace.analysis.results import (
    NO_TELEMETRY,
    NO_TIMESTAMPS,
    SIMULATED_NOTE,
    AnalyzeOptions,
    BandwidthResult,
    EnergyResult,
    LinkPeak,
    OverlapResult,
    PowerResult,
    RunConfig,
)
from charllm_trace.analysis.results_breakdown import NO_GPU_OPS
from charllm_trace.analysis.runconfig import run_config_of
from charllm_trace.analysis.stream_analyses import rank_stream_analyses, stream_analyses_from
from charllm_trace.analysis.telemetry_source import telemetry_source_note

#: Why a trace without timestamps or durations is not simulated.
NO_DURATIONS = (
    "this trace records neither times nor durations (a host execution trace alone): a simulated "
    "timeline would be all zero; convert it together with its Kineto profile"
)


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


def _of(m: Merge, name: str) -> list[tuple[int, Any]]:
    """(rank, part) of every rank that gave a part for ``name``, its frames built (for merges
    that read them part by part; the others read ``m.entries`` and ``m.frames``)."""
    return [(p.rank, p.parts[name]) for p in m.parts if p.parts.get(name) is not None]


# ---- overlap ----


def overlap_part(ctx: RankContext, options: AnalyzeOptions) -> OverlapResult | None:
    if ctx.untimed:
        return None
    return overlap(
        ctx,
        per_step=options.per_step,
        hta_compat=options.hta_compat,
        hta_keep_last_step=options.hta_keep_last_step,
        group_dims=ctx.dims,
    )


def merge_overlap(m: Merge) -> OverlapResult | None:
    got = m.entries("overlap")
    if not got:
        no_ts = [p.rank for p in m.parts if p.no_ts]
        no_dur = [p.rank for p in m.parts if p.no_dur]
        m.skipped["overlap"] = (
            NO_DURATIONS
            if no_dur and len(no_dur) == len(no_ts)
            else NO_TIMESTAMPS
            if no_ts
            else "no trace to analyse"
        )
        return None
    ovs = [o for _, o in got]
    ov = OverlapResult(
        per_rank=_concat(m.frames("overlap", ("per_rank",))),
        per_group=_concat(m.frames("overlap", ("per_group",))),
        per_dim=_concat(m.frames("overlap", ("per_dim",))),
        mode=ovs[0].mode if len({o.mode for o in ovs}) == 1 else "mixed",
        hta_compat=m.options.hta_compat,
        simulated=m.simulated,
        notes=merge_notes([(r, o.notes) for r, o in got], m.multi),
    )
    ov.rank_spread = rank_spread(ov.per_rank, ov.per_dim)  # per dimension, over the ranks
    no_ts = [p.rank for p in m.parts if p.no_ts]
    if no_ts:
        ov.notes.append(f"ranks {no_ts}: {NO_TIMESTAMPS}")
    if m.simulated:
        ov.notes.insert(0, SIMULATED_NOTE)
    return ov


# ---- idle time per stream and launch statistics (timed ranks; one stream table for both) ----


def streams_part(ctx: RankContext, options: AnalyzeOptions) -> Any:
    return None if ctx.untimed else rank_stream_analyses(ctx, options)


def merge_idle_time(m: Merge) -> Any:
    timed = m.timed("idle_time")  # (an untimed rank has no part: its frames are not stacked)
    idle, launch, why = stream_analyses_from(
        timed, m.options, simulated=m.simulated, frames=lambda path: m.frames("idle_time", path)
    )
    if why is not None:
        no_ts_why = NO_TIMESTAMPS.replace("overlap needs them", "idle time per stream and launches need them")
        m.skipped["idle_time"] = m.skipped["launch"] = no_ts_why if not timed else why
    m.shared["launch"] = launch
    return idle


def merge_launch(m: Merge) -> Any:
    return m.shared.pop("launch", None)


# ---- bandwidth ----


@dataclass
class BandwidthPart:
    """One rank's collectives (COLLECTIVE_SCHEMA rows) and what the skipped reason reads."""

    coll: pl.DataFrame
    peaks: dict[str, LinkPeak] = field(default_factory=dict)
    tally: Tally = field(default_factory=dict)  # group sizes taken from the collectives' tensors
    n_comm: int = 0
    comm_timed: int = 0  # of them, with a duration (read with n_comm, for the skipped reason)
    comm_names: Counter[str] = field(default_factory=Counter)
    device: bool = False  # the rank has device activity
    meta_simulated: bool = False  # the trace says it is simulated (bandwidth's flag)


def bandwidth_part(ctx: RankContext, options: AnalyzeOptions) -> BandwidthPart:
    part = BandwidthPart(coll=pl.DataFrame(), meta_simulated=bool(ctx.trace.meta.extra.get("simulated")))
    part.coll, part.peaks = collectives(
        ctx,
        peak_gbps=options.peak_gbps,
        group_dims=ctx.dims,
        hosts=ctx.hosts,
        tally=part.tally,
        node_gpus=ctx.node_gpus,
    )
    if part.coll.height == 0:  # only read when no rank has a timed collective (the skipped reason)
        part.n_comm, part.comm_timed, part.comm_names, part.device = comm_facts(ctx.trace)
    return part


def merge_bandwidth(m: Merge) -> BandwidthResult | None:
    parts: list[BandwidthPart] = [p for _, p in m.entries("bandwidth")]  # their frames: m.frames
    peaks: dict[str, LinkPeak] = {}
    tally: Tally = {}
    for p in parts:
        peaks.update(p.peaks)
        for k, v in p.tally.items():  # summed over ranks
            tally[k] = tally.get(k, 0) + v
    bw = bandwidth_from(
        m.frames("bandwidth", ("coll",)), peaks, simulated=any(p.meta_simulated for p in parts), tally=tally
    )
    if bw.collectives.height == 0:
        m.skipped["bandwidth"] = no_bandwidth_reason(
            sum(p.n_comm for p in parts),
            sum(p.comm_timed for p in parts),
            sum((p.comm_names for p in parts), Counter()),
            any(p.device for p in parts),
        )
        return None
    if m.simulated:
        bw.notes.insert(0, "durations are recorded ones; start times (steps, skews) are simulated")
    if any(p.no_ts for p in m.parts):
        bw.notes.append("no timestamps: steps and cross-rank arrival skew not available")
    return bw


# ---- energy and power (one telemetry pass) ----


@dataclass
class EnergyPart:
    """One rank's energy and power (None without power samples), and what the skipped reason reads."""

    energy: EnergyResult | None = None
    power: PowerResult | None = None
    tel_rows: int = 0
    tel_cols: list[str] = field(default_factory=list)  # telemetry columns holding some value


def energy_part(ctx: RankContext, options: AnalyzeOptions) -> EnergyPart:
    tel = ctx.trace.telemetry
    part = EnergyPart(
        tel_rows=tel.height,
        tel_cols=[
            c
            for c in tel.columns
            if c.endswith(("_w", "_c", "_mhz", "_pct")) and tel[c].null_count() < tel.height
        ],
    )
    if tel.height and not tel["power_w"].is_null().all():
        part.energy = energy(ctx, method=options.energy_method, per_step=options.per_step)
        part.power = power(ctx, per_step=options.per_step)
        src = telemetry_source_note(ctx.trace)  # an imported log: its tool, file and rate
        if src:
            part.energy.notes.insert(0, src)
            part.power.notes.insert(0, src)
    return part


def merge_energy(m: Merge) -> EnergyResult | None:
    got = m.entries("energy")
    parts = [(r, p) for r, p in got if p.energy is not None and p.power is not None]
    if parts:
        en = EnergyResult(  # (a rank without energy has no power either: energy_part)
            totals=_concat(m.frames("energy", ("energy", "totals"))),
            by=_concat(m.frames("energy", ("energy", "by"))),
            method=m.options.energy_method,
            simulated=m.simulated,
            notes=merge_notes([(r, p.energy.notes) for r, p in parts], m.multi),
        )
        m.shared["power"] = PowerResult(
            per_step=_concat(m.frames("energy", ("power", "per_step"))),
            throttle=_concat(m.frames("energy", ("power", "throttle"))),
            simulated=m.simulated,
            notes=merge_notes([(r, p.power.notes) for r, p in parts], m.multi),
        )
        missing = [r for r, p in got if p.energy is None]
        if missing:
            en.notes.append(f"ranks {missing}: no telemetry")
        return en
    m.skipped["energy"] = m.skipped["power"] = _no_energy_reason(m)
    return None


def _no_energy_reason(m: Merge) -> str:
    if m.simulated:
        return "simulated timeline: telemetry cannot be joined to it; energy and power not computed"
    tel = [p for _, p in m.entries("energy")]
    n_tel = sum(t.tel_rows for t in tel)
    if not n_tel:
        return NO_TELEMETRY
    cols = sorted({c for t in tel for c in t.tel_cols})  # samples without power (a CPU-only run)
    return (
        f"{n_tel:,} telemetry samples, but none has a power reading"
        + (f" (they hold {', '.join(cols)})" if cols else "")
        + ": energy and power not computed"
    )


def merge_power(m: Merge) -> PowerResult | None:
    return m.shared.pop("power", None)


# ---- time breakdown (durations suffice: without timestamps, the whole trace only) ----


def breakdown_part(ctx: RankContext, options: AnalyzeOptions) -> RankBreakdown:
    return rank_breakdown(
        ctx.rank,
        ctx,
        per_step=options.per_step,
        hta_compat=options.hta_compat,
        hta_keep_last_step=options.hta_keep_last_step,
    )


def merge_breakdown(m: Merge) -> Any:
    bd = breakdown_from([p for _, p in _of(m, "breakdown")], top_n=m.options.breakdown_top)
    if bd is None:
        m.skipped["breakdown"] = NO_GPU_OPS
    return bd


# ---- critical path and what-if (every rank's graph at once: the caller's graph step) ----


def merge_graph(m: Merge) -> Any:
    no_ts = [p.rank for p in m.parts if p.no_ts]
    cp, wi = m.graph_step(m.skipped, no_ts, m.simulated) if m.graph_step else (None, None)
    m.shared["what_if"] = wi
    return cp


def merge_what_if(m: Merge) -> Any:
    return m.shared.pop("what_if", None)


# ---- pipeline bubbles and waiting vs transfer (labelled / matched across ranks) ----


def pipeline_part(ctx: RankContext, options: AnalyzeOptions) -> tuple[pl.DataFrame | None, list[str]]:
    return rank_microbatches(ctx.rank, ctx.trace, ctx.dims)


def _merge_rank_frames(m: Merge, name: str, build: Callable[..., Any], reason: str) -> Any:
    """The run's result of ``name`` from every rank's ``(frame | None, notes)`` part (``build``:
    the frames of the ranks that have one, the notes merged); ``reason`` in ``skipped`` when
    ``build`` finds nothing."""
    got = m.entries(name)
    res = build(
        m.frames(name, (0,)),
        merge_notes([(r, ns) for r, (_, ns) in got], m.multi),
        simulated=m.simulated,
    )
    if res is None:
        m.skipped[name] = reason
    return res


def merge_pipeline(m: Merge) -> Any:
    return _merge_rank_frames(m, "pipeline", pipeline_from, NO_LABELS)


def comm_wait_part(ctx: RankContext, options: AnalyzeOptions) -> tuple[pl.DataFrame | None, list[str]]:
    return rank_comm_ops(ctx.rank, ctx.trace, ctx.dims)


def merge_comm_wait(m: Merge) -> Any:
    return _merge_rank_frames(m, "comm_wait", comm_wait_from, NO_MATCH)


# ---- iterations, phases, requests; the run's configuration ----


def iterations_part(ctx: RankContext, options: AnalyzeOptions) -> Any:
    if ctx.untimed:  # with --step-marker, or where phases or requests are marked
        return None
    its = rank_iterations(ctx.rank, ctx.trace, ctx.classified, ctx.windows, bool(options.step_marker))
    if its is not None:
        its.notes[:0] = ctx.marker_notes
    return its


def merge_iterations(m: Merge) -> Any:
    its = _of(m, "iterations")
    return iterations_from(its, merge_notes([(r, i.notes) for r, i in its], m.multi))


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


def merge_config(m: Merge) -> RunConfig | None:
    metas = [p.meta for p in m.parts if p.meta is not None]
    return run_config_of(m.manifest, metas, layout_of(m.manifest, m.options))
