"""``analyze_run``: the four analyses of a run, bundled (what the CLI's ``analyze`` prints)."""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl

from charllm_trace.analysis.bandwidth import bandwidth
from charllm_trace.analysis.classify import classify, with_phase
from charllm_trace.analysis.critical import critical_path
from charllm_trace.analysis.energy import energy
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.parallel import name_groups
from charllm_trace.analysis.power import power
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
from charllm_trace.analysis.step_windows import step_windows
from charllm_trace.analysis.whatif import simulate, what_if
from charllm_trace.graph.engine import CycleError
from charllm_trace.graph.run import build_run_graph
from charllm_trace.model import ProcessGroup, Run, Trace, rank_ranges


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


def analyze_run(run: Run, options: AnalyzeOptions | None = None) -> RunAnalysis:
    """Overlap, bandwidth, energy and power of every rank of ``run``.

    An analysis that cannot be computed for any rank is None, with the reason in
    ``skipped``. Pure: no I/O, no printing."""
    options = options or AnalyzeOptions()
    skipped: dict[str, str] = {}
    traces: dict[int, Trace] = {}
    simulated = False
    no_ts: list[int] = []
    for r in run.ranks:
        tr = run.traces[r]
        if not tr.meta.has_timestamps:
            if options.simulate:
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
        if no_ts:
            ov.notes.append(f"ranks {no_ts}: {NO_TIMESTAMPS}")
        if simulated:
            ov.notes.insert(0, SIMULATED_NOTE)
    else:
        skipped["overlap"] = NO_TIMESTAMPS if no_ts else "no trace to analyse"

    # bandwidth (durations suffice: it runs without timestamps too)
    bw = bandwidth(work, peak_gbps=options.peak_gbps, group_dims=dims, classified=classified, windows=windows)
    if bw.collectives.height == 0:
        skipped["bandwidth"] = "no collectives in this trace: bandwidth not computed"
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
        if simulated:
            reason = "simulated timeline: telemetry cannot be joined to it; energy and power not computed"
        skipped["energy"] = reason
        skipped["power"] = reason
    # the graph of a simulated run is built from its recorded order (the engine that simulated it)
    cp, wi = _graph_analyses(
        run if simulated else work, options, recorded if simulated else classified, skipped, no_ts
    )
    res = RunAnalysis(
        overlap=ov,
        critical_path=cp,
        what_if=wi,
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
    partial = run.manifest.get("partial") if isinstance(run.manifest, dict) else None
    if isinstance(partial, str):  # --allow-partial: every result says it covers part of the run
        for r in (ov, bw_res, en, pw):
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
