"""``analyze_run``: the four analyses of a run, bundled (what the CLI's ``analyze`` prints)."""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl

from charllm_trace.analysis.bandwidth import bandwidth
from charllm_trace.analysis.breakdown import run_breakdown
from charllm_trace.analysis.classify import classify, with_phase
from charllm_trace.analysis.critical import critical_path
from charllm_trace.analysis.energy import energy
from charllm_trace.analysis.flops import run_flops
from charllm_trace.analysis.launch_gap import lost_device_activity
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.parallel import name_groups
from charllm_trace.analysis.power import power
from charllm_trace.analysis.rank_spread import rank_spread
from charllm_trace.analysis.results import (  # the notes' words live with the result types
    CAN_SIMULATE,  # noqa: F401 - part of this module's interface
    NO_TELEMETRY,
    NO_TIMESTAMPS,
    SIMULATED_NOTE,
    AnalyzeOptions,
    CriticalPathResult,
    EnergyResult,
    OverlapResult,
    PowerResult,
    RunAnalysis,
    WhatIfResult,
)
from charllm_trace.analysis.results_breakdown import NO_GPU_OPS
from charllm_trace.analysis.runconfig import run_config
from charllm_trace.analysis.step_windows import step_windows
from charllm_trace.analysis.stream_analyses import stream_analyses
from charllm_trace.analysis.telemetry_source import telemetry_source_note
from charllm_trace.analysis.whatif import simulate, what_if
from charllm_trace.graph.engine import CycleError
from charllm_trace.graph.run import build_run_graph
from charllm_trace.model import COMM_NODE_TYPES, ProcessGroup, Run, Trace, rank_ranges


def _layout(run: Run, options: AnalyzeOptions) -> dict[str, int] | None:
    if options.parallel:
        return dict(options.parallel)
    lay = run.manifest.get("parallel") if isinstance(run.manifest, dict) else None
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


def _all_groups(run: Run) -> list[ProcessGroup]:
    seen: dict[str, ProcessGroup] = {}
    for tr in run:
        for pg in tr.meta.process_groups:
            seen.setdefault(pg.name, pg)
    return list(seen.values())


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


def _merge_notes(per_rank: list[tuple[int, list[str]]], multi: bool) -> list[str]:
    """Each distinct note once, with the ranks it holds for (``ranks 0-7: ...``; on the 8-rank
    DLRM set the same note was printed once per rank), in order of first appearance."""
    ranks_of: dict[str, list[int]] = {}
    for r, notes in per_rank:
        for n in notes:
            rs = ranks_of.setdefault(n, [])
            if r not in rs:
                rs.append(r)
    if not multi:
        return list(ranks_of)
    return [f"{'ranks' if len(rs) > 1 else 'rank'} {rank_ranges(rs)}: {n}" for n, rs in ranks_of.items()]


#: Why a trace without timestamps or durations is not simulated.
NO_DURATIONS = (
    "this trace records neither times nor durations (a host execution trace alone): a simulated "
    "timeline would be all zero; convert it together with its Kineto profile"
)


def _has_durations(trace: Trace) -> bool:
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


def analyze_run(run: Run, options: AnalyzeOptions | None = None) -> RunAnalysis:
    """Overlap, bandwidth, energy and power of every rank of ``run``.

    An analysis that cannot be computed for any rank is None, with the reason in
    ``skipped``. Pure: no I/O, no printing."""
    options = options or AnalyzeOptions()
    skipped: dict[str, str] = {}
    traces: dict[int, Trace] = {}
    simulated = False
    no_ts: list[int] = []
    no_dur: list[int] = []
    for r in run.ranks:
        tr = run.traces[r]
        if not tr.meta.has_timestamps:
            if options.simulate and not _has_durations(tr):
                no_dur.append(r)  # nothing to simulate from: every time would be 0
                no_ts.append(r)
            elif options.simulate:
                tr = simulate(tr)
                simulated = True
            else:
                no_ts.append(r)
        traces[r] = tr
    work = Run(traces=traces, manifest=run.manifest, source=run.source)
    multi = len(traces) > 1
    dims = name_groups(_all_groups(work), _layout(work, options))
    # each rank is classified once (the classes do not depend on times: a simulated copy takes
    # its original's) and that frame is passed to every analysis and kept for the report
    recorded = {r: classify(run.traces[r].nodes) for r in run.ranks}
    classified = {
        r: recorded[r] if tr is run.traces[r] else tr.nodes.with_columns(recorded[r]["cls"])
        for r, tr in traces.items()
    }

    # the step windows (GPU time, analysis/step_windows.py): one definition for every analysis
    windows = {r: step_windows(tr, classified[r]) for r, tr in traces.items() if r not in no_ts}

    # overlap
    ov_parts: list[OverlapResult] = []
    for r, tr in traces.items():
        if r in no_ts:
            continue
        ov_parts.append(
            overlap(
                tr,
                per_step=options.per_step,
                hta_compat=options.hta_compat,
                hta_keep_last_step=options.hta_keep_last_step,
                group_dims=dims,
                classified=classified[r],
                windows=windows[r],
            )
        )
    ov: OverlapResult | None = None
    if ov_parts:
        ov = OverlapResult(
            per_rank=_concat([o.per_rank for o in ov_parts]),
            per_group=_concat([o.per_group for o in ov_parts]),
            per_dim=_concat([o.per_dim for o in ov_parts]),
            mode=ov_parts[0].mode if len({o.mode for o in ov_parts}) == 1 else "mixed",
            hta_compat=options.hta_compat,
            simulated=simulated,
            notes=_merge_notes(
                [(r, o.notes) for r, o in zip([r for r in traces if r not in no_ts], ov_parts, strict=True)],
                multi,
            ),
        )
        ov.rank_spread = rank_spread(ov.per_rank, ov.per_dim)  # per dimension, over the ranks
        if no_ts:
            ov.notes.append(f"ranks {no_ts}: {NO_TIMESTAMPS}")
        if simulated:
            ov.notes.insert(0, SIMULATED_NOTE)
    else:
        skipped["overlap"] = (
            NO_DURATIONS
            if no_dur and len(no_dur) == len(no_ts)
            else NO_TIMESTAMPS
            if no_ts
            else "no trace to analyse"
        )

    # idle time per GPU stream and launch statistics (timed ranks)
    timed = {r: tr for r, tr in traces.items() if r not in no_ts}
    idle, launch, why = stream_analyses(timed, classified, options, simulated=simulated, windows=windows)
    if why is not None:
        no_ts_why = NO_TIMESTAMPS.replace("overlap needs them", "idle time per stream and launches need them")
        skipped["idle_time"] = skipped["launch"] = no_ts_why if not timed else why

    # bandwidth (durations suffice: it runs without timestamps too)
    bw = bandwidth(work, peak_gbps=options.peak_gbps, group_dims=dims, classified=classified, windows=windows)
    if bw.collectives.height == 0:
        n_comm = sum(int(tr.nodes["node_type"].is_in(COMM_NODE_TYPES).sum()) for tr in traces.values())
        skipped["bandwidth"] = (
            f"{n_comm:,} collectives, but none has a duration (a host execution trace alone records "
            "none; convert it together with its Kineto profile): bandwidth not computed"
            if n_comm
            else "no collectives in this trace: bandwidth not computed"
        )
        bw_res = None
    else:
        bw_res = bw
        if simulated:
            bw.notes.insert(0, "durations are recorded ones; start times (steps, skews) are simulated")
        if no_ts:
            bw.notes.append("no timestamps: steps and cross-rank arrival skew not available")

    # energy and power
    en_parts: list[tuple[int, EnergyResult]] = []
    pw_parts: list[tuple[int, PowerResult]] = []
    for r, tr in traces.items():
        if tr.telemetry.height == 0 or tr.telemetry["power_w"].is_null().all():
            continue
        classified[r] = with_phase(classified[r])  # the phase column energy needs, added once
        en_parts.append(
            (
                r,
                energy(
                    tr,
                    method=options.energy_method,
                    per_step=options.per_step,
                    classified=classified[r],
                    windows=windows.get(r),
                ),
            )
        )
        pw_parts.append(
            (r, power(tr, per_step=options.per_step, classified=classified[r], windows=windows.get(r)))
        )
        src = telemetry_source_note(tr)  # an imported log: its tool, file and rate
        if src:
            en_parts[-1][1].notes.insert(0, src)
            pw_parts[-1][1].notes.insert(0, src)
    en = pw = None
    if en_parts:
        en = EnergyResult(
            totals=_concat([e.totals for _, e in en_parts]),
            by=_concat([e.by for _, e in en_parts]),
            method=options.energy_method,
            simulated=simulated,
            notes=_merge_notes([(r, e.notes) for r, e in en_parts], multi),
        )
        pw = PowerResult(
            per_step=_concat([p.per_step for _, p in pw_parts]),
            throttle=_concat([p.throttle for _, p in pw_parts]),
            simulated=simulated,
            notes=_merge_notes([(r, p.notes) for r, p in pw_parts], multi),
        )
        missing = [r for r in traces if r not in {r for r, _ in en_parts}]
        if missing:
            en.notes.append(f"ranks {missing}: no telemetry")
    else:
        reason = NO_TELEMETRY
        n_tel = sum(tr.telemetry.height for tr in traces.values())
        if n_tel:  # samples without power (a CPU-only run: temperatures or clocks only)
            cols = sorted(
                {c for tr in traces.values() for c in tr.telemetry.columns
                 if c.endswith(("_w", "_c", "_mhz", "_pct")) and tr.telemetry[c].null_count() < tr.telemetry.height}
            )  # fmt: skip
            reason = (
                f"{n_tel:,} telemetry samples, but none has a power reading"
                + (f" (they hold {', '.join(cols)})" if cols else "")
                + ": energy and power not computed"
            )
        if simulated:
            reason = "simulated timeline: telemetry cannot be joined to it; energy and power not computed"
        skipped["energy"] = reason
        skipped["power"] = reason
    # time breakdown (durations suffice: without timestamps, the whole trace only)
    bd = run_breakdown(
        traces,
        per_step=options.per_step,
        top_n=options.breakdown_top,
        classified=classified,
        hta_compat=options.hta_compat,
        hta_keep_last_step=options.hta_keep_last_step,
        windows=windows,
    )
    if bd is None:
        skipped["breakdown"] = NO_GPU_OPS
    # the graph of a simulated run is built from its recorded order (the engine that simulated it)
    cp, wi = _graph_analyses(
        run if simulated else work, options, recorded if simulated else classified, skipped, no_ts
    )
    fl, fl_notes = run_flops(
        traces, classified, per_step=options.per_step, simulated=simulated, skipped=skipped, windows=windows
    )
    if fl is not None:
        fl.notes = _merge_notes(fl_notes, multi)
    if no_dur and len(no_dur) == len(no_ts):
        for k in ("critical_path", "what_if"):
            if k in skipped:
                skipped[k] = NO_DURATIONS
    # a profile that lost its device activity: said first, in the first result shown
    lost = [(r, [n]) for r, tr in traces.items() if (n := lost_device_activity(tr.nodes)) is not None]
    shown = next((x for x in (ov, bw_res) if x is not None), None)
    if lost and shown is not None:
        shown.notes[:0] = _merge_notes(lost, multi)
    res = RunAnalysis(
        overlap=ov,
        critical_path=cp,
        what_if=wi,
        idle_time=idle,
        launch=launch,
        config=run_config(work, _layout(work, options)),
        breakdown=bd,
        flops=fl,
        bandwidth=bw_res,
        energy=en,
        power=pw,
        skipped=skipped,
        ranks=list(traces),
        simulated=simulated,
        source=run.source,
        options=options,
    )
    res.classified = classified
    dup = _merge_notes([(r, duplicate_step_notes(tr)) for r, tr in traces.items()], multi)
    target = next((x for x in (ov, pw, bw_res, en) if x is not None), None)
    if dup and target is not None:  # reported, not dropped silently (the first of each is used)
        target.notes.extend(dup)
    partial = run.manifest.get("partial") if isinstance(run.manifest, dict) else None
    if isinstance(partial, str):  # --allow-partial: every result says it covers part of the run
        for r in (ov, bw_res, en, pw, idle, launch, bd, fl):
            if r is not None:
                r.notes.insert(0, partial)
    return res


def _graph_analyses(
    run: Run,
    options: AnalyzeOptions,
    classified: dict[int, pl.DataFrame],
    skipped: dict[str, str],
    no_ts: list[int],
) -> tuple[CriticalPathResult | None, WhatIfResult | None]:
    """Critical path and what-if replay on the execution graph (one graph for both)."""
    if not (options.critical_path or options.what_if):
        return None, None
    if no_ts:
        reason = NO_TIMESTAMPS.replace("overlap needs them", "the execution graph needs them")
        if options.critical_path:
            skipped["critical_path"] = reason
        if options.what_if:
            skipped["what_if"] = reason
        return None, None
    try:
        graph = build_run_graph(run, classified)
        cp = critical_path(run, graph=graph, segments=False) if options.critical_path else None
        wi = what_if(run, dict(options.what_if), graph=graph) if options.what_if else None
        if not options.per_step:  # per-step rows only when asked for, as in the other analyses
            whole = pl.col("step").is_null()
            if cp is not None:
                cp = dataclasses.replace(
                    cp,
                    paths=cp.paths.filter(whole),
                    top_ops=cp.top_ops.filter(whole),
                    segments=cp.segments.filter(whole),
                )
            if wi is not None:
                wi = dataclasses.replace(wi, steps=wi.steps.filter(whole))
    except CycleError as exc:
        for k, on in (("critical_path", options.critical_path), ("what_if", options.what_if)):
            if on:
                skipped[k] = f"the execution graph has dependency cycles ({exc.problem})"
        return None, None
    return cp, wi


def analyze_trace(trace: Trace, options: AnalyzeOptions | None = None, **kw: Any) -> RunAnalysis:
    """``analyze_run`` of one trace; keywords are ``AnalyzeOptions`` fields (applied over ``options``)."""
    opts = dataclasses.replace(options, **kw) if options is not None else AnalyzeOptions(**kw)
    return analyze_run(Run.single(trace), opts)
