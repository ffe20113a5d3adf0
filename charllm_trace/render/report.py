"""What the HTML report shows, assembled from a Run and its analyses (pure: no I/O).

:func:`report_data` picks and reshapes already-defined quantities into the frames
the charts draw: what comes from the trace itself — the per-rank activity lanes and the
telemetry series — from :mod:`charllm_trace.render.report_views` (saved with results, so
:func:`report_data_from` redraws a report without the trace); the overlap, bandwidth,
energy and power figures straight from :class:`RunAnalysis`, the critical paths and the
what-if prediction straight from ``RunAnalysis.critical_path`` / ``RunAnalysis.what_if``.
:func:`render_report` turns it into one self-contained HTML page
(:mod:`charllm_trace.render.html`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from charllm_trace.analysis.comm_wait_results import CommWaitResult
from charllm_trace.analysis.cpu_wait_results import CpuWaitResult
from charllm_trace.analysis.dims_results import DimsResult
from charllm_trace.analysis.energy import IDLE
from charllm_trace.analysis.findings import Finding, findings
from charllm_trace.analysis.flops_results import FlopsResult
from charllm_trace.analysis.idle_results import IdleTimeResult, LaunchResult
from charllm_trace.analysis.phase_power_results import PhasePowerResult
from charllm_trace.analysis.pipeline_results import PipelineResult
from charllm_trace.analysis.results import CP_CATEGORIES, BreakdownResult, RunAnalysis, WhatIfResult
from charllm_trace.core.model import Run
from charllm_trace.render.breakdown_html import breakdown_parts
from charllm_trace.render.report_ranks import rank_step_section
from charllm_trace.render.report_sections import findings_html, power_figures, stragglers_html
from charllm_trace.render.report_sections import ms as _ms
from charllm_trace.render.report_sections import notes_list as _notes_list
from charllm_trace.render.report_sections import pct as _pct
from charllm_trace.render.report_sections import what_if_parts as _what_if_parts
from charllm_trace.render.report_views import (  # noqa: F401 - the views' names are part of this module's interface
    MAX_DEVICE_CHARTS,
    MAX_LANES,
    DeviceSeries,
    RankLanes,
    ReportViews,
    drawn_run,
    report_views,
)
from charllm_trace.render.svg import fmt_bytes

TOP_OPS = 15  # operators in the energy chart
CP_TOP_OPS = 10  # operators listed per critical path
CP_MAX_RANK_OPS = 4  # with more ranks, the operators of the job's critical path only

#: Label and colour of each critical-path category (``CP_CATEGORIES``).
CP_STYLE = {
    "gpu_compute": ("GPU compute", "#4c78a8"),
    "gpu_memory": ("GPU memcpy/memset", "#72b7b2"),
    "communication": ("communication", "#f58518"),
    "cpu_op": ("CPU op (self time)", "#54a24b"),
    "launch": ("launch / runtime call", "#b279a2"),
    "sync_wait": ("synchronisation wait", "#e45756"),
    "idle": ("idle", "#bab0ac"),
}
assert tuple(CP_STYLE) == CP_CATEGORIES


@dataclass
class ReportData:
    title: str
    source: str | None
    ranks: list[int]
    origin_ns: int | None
    lanes: list[RankLanes] = field(default_factory=list)
    overlay: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # rank -> (t, W)
    overlap_total: pl.DataFrame | None = None
    overlap_steps: pl.DataFrame | None = None  # rank, step, overlap_pct, span_ns, exposed_comm_ns
    collectives: pl.DataFrame | None = None  # coll_type, bytes, busbw_gbps
    peaks: list[tuple[float, str]] = field(default_factory=list)
    energy_ops: pl.DataFrame | None = None  # key, energy_j (summed over ranks), sorted
    energy_totals: pl.DataFrame | None = None
    devices: list[DeviceSeries] = field(default_factory=list)
    critical_paths: pl.DataFrame | None = None  # CRITICAL_PATH_SCHEMA rows
    critical_ops: pl.DataFrame | None = None  # CRITICAL_OPS_SCHEMA rows of the whole-trace paths
    critical_notes: list[str] = field(default_factory=list)
    what_if: pl.DataFrame | None = None  # WHATIF_SCHEMA rows (PREDICTED)
    what_if_factors: dict[str, float] = field(default_factory=dict)
    what_if_fixed_wait_pct: float | None = None
    what_if_notes: list[str] = field(default_factory=list)
    what_if_result: WhatIfResult | None = None  # the prediction (its range and basis: render/whatif_text.py)
    idle_time: IdleTimeResult | None = None  # GPU idle per stream (render/report_streams.py)
    launch: LaunchResult | None = None
    breakdown: BreakdownResult | None = None  # the time breakdown (render/breakdown_html.py)
    flops: FlopsResult | None = None  # achieved FLOP/s and MFU (estimates)
    pipeline: PipelineResult | None = None  # microbatches and bubbles (render/pipeline_html.py)
    comm_wait: CommWaitResult | None = None  # waiting vs transfer (render/comm_wait_html.py)
    cpu_wait: CpuWaitResult | None = None  # the launching thread's scheduler state (render/cpu_wait_html.py)
    dims: DimsResult | None = None  # figures by parallel dimension (render/dims_html.py)
    phase_power: PhasePowerResult | None = None  # power per phase, excursions (render/phase_power_html.py)
    simulated: bool = False
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # the sentences at the top
    stragglers: pl.DataFrame | None = None  # STRAGGLER_SCHEMA rows
    step_marks: list[tuple[int, int]] = field(default_factory=list)  # (step, first start ns over ranks)


def report_data(
    run: Run,
    an: RunAnalysis,
    title: str | None = None,
    *,
    classified: dict[int, pl.DataFrame] | None = None,
) -> ReportData:
    """The frames and series the report draws, from ``run`` and its analyses.

    The activity lanes use the nodes' classification the analyses made (``classified``, by
    default ``an.classified``); a rank without one is classified here."""
    cls_by_rank = an.classified if classified is None else classified
    return report_data_from(report_views(run, cls_by_rank), an, title)


def report_data_from(views: ReportViews, an: RunAnalysis, title: str | None = None) -> ReportData:
    """The frames and series the report draws, from the trace's views and the analyses (saved
    ones too: nothing here reads the trace)."""
    data = ReportData(
        title=title or "charllm-trace report",
        source=views.source,
        ranks=list(views.ranks),
        origin_ns=views.origin_ns,
        lanes=list(views.lanes),
        overlay=dict(views.overlay),
        devices=list(views.devices),
        skipped=dict(an.skipped),
    )
    for name, notes in an.notes().items():
        data.notes += [f"{name}: {n}" for n in notes]
    data.notes += views.notes
    data.findings = findings(an)
    if an.overlap is not None:
        pr = an.overlap.per_rank
        marks = (
            pr.filter(pl.col("step").is_not_null())
            .group_by("step")
            .agg(pl.col("start_ns").min())
            .sort("step")
        )
        data.step_marks = [(int(a), int(b)) for a, b in marks.iter_rows() if b is not None]
        data.overlap_total = pr.filter(pl.col("step").is_null()).sort("rank")
        data.overlap_steps = (
            pr.filter(pl.col("step").is_not_null())
            .select("rank", "step", "overlap_pct", "span_ns", "exposed_comm_ns")
            .sort("step", "rank")
        )
    if an.bandwidth is not None:
        data.stragglers = an.bandwidth.stragglers
        c = an.bandwidth.collectives
        data.collectives = c.select("coll_type", "bytes", "busbw_gbps", "rank", "pg_name", "dur_ns").filter(
            pl.col("bytes").is_not_null() & pl.col("busbw_gbps").is_not_null()
        )
        labels = {}
        for p in an.bandwidth.peaks.values():
            if p.gbps is not None:
                labels.setdefault(float(p.gbps), p.link)
        for g in c["peak_gbps"].drop_nulls().unique().sort().to_list():
            data.peaks.append((float(g), f"{labels.get(float(g), 'link')} peak {g:g} GB/s"))
    if an.energy is not None:
        ops = (
            an.energy.group("op")
            .group_by("key")
            .agg(pl.col("energy_j").sum())
            .sort("energy_j", "key", descending=[True, False])  # ties by name: the same page every time
        )
        if ops.height > TOP_OPS:
            rest = ops.slice(TOP_OPS)
            ops = pl.concat(
                [
                    ops.head(TOP_OPS),
                    pl.DataFrame(
                        {"key": [f"({rest.height} other ops)"], "energy_j": [rest["energy_j"].sum()]}
                    ),
                ]
            )
        if IDLE not in ops["key"].to_list():  # the idle share, unless the analysis lists it already
            idle = float(an.energy.totals["idle_j"].sum())
            ops = pl.concat([ops, pl.DataFrame({"key": [IDLE], "energy_j": [idle]})])
        data.energy_ops = ops
        data.energy_totals = an.energy.totals
    data.simulated = an.simulated
    data.idle_time, data.launch = an.idle_time, an.launch
    data.breakdown = an.breakdown
    data.flops = an.flops
    data.pipeline, data.comm_wait, data.cpu_wait = an.pipeline, an.comm_wait, an.cpu_wait
    data.dims, data.phase_power = an.dims, an.phase_power
    if an.critical_path is not None:
        cp = an.critical_path
        data.critical_paths = cp.paths
        ops = (
            cp.top_ops.filter(pl.col("step").is_null())
            .sort(pl.col("scope") == "job", "rank", maintain_order=True)  # ranks first, then the job
            .group_by("scope", "rank", maintain_order=True)
            .head(CP_TOP_OPS)
        )
        if ops["rank"].n_unique() > CP_MAX_RANK_OPS and (ops["scope"] == "job").any():
            ops = ops.filter(pl.col("scope") == "job")  # many ranks: the job's path only
        data.critical_ops = ops
        data.critical_notes = list(cp.notes)
    if an.what_if is not None:
        wi = an.what_if
        data.what_if = wi.steps
        data.what_if_factors = dict(wi.factors)
        data.what_if_fixed_wait_pct = wi.fixed_wait_pct
        data.what_if_notes = [n for n in wi.notes if n not in data.critical_notes]
        data.what_if_result = wi
    return data


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def _name(source: str | None) -> str:
    """The input's file or directory name only: a report may be shared, its path not."""
    if not source:
        return "in memory"
    return source.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]


def render_report(data: ReportData) -> str:
    """One self-contained HTML page of ``data``."""
    from charllm_trace.render import html as H
    from charllm_trace.render.report_streams import stream_parts

    o = data.origin_ns or 0
    rep = H.HtmlReport(
        data.title,
        f"{len(data.ranks)} rank(s) · source: {_name(data.source)} · times from the run's first event"
        + (" · SIMULATED timeline: the source has no timestamps" if data.simulated else ""),
    )
    # 1. timeline
    if data.lanes:
        lanes = [
            H.Lane(
                f"rank {ln.rank}",
                [
                    H.LaneRow("compute", ln.compute[0] - o, ln.compute[1] - o),
                    H.LaneRow("communication", ln.comm[0] - o, ln.comm[1] - o),
                    H.LaneRow("idle", ln.idle[0] - o, ln.idle[1] - o),
                ],
            )
            for ln in data.lanes
        ]
        x0 = min(ln.window[0] for ln in data.lanes) - o
        x1 = max(ln.window[1] for ln in data.lanes) - o
        overlay = [
            H.Series(f"rank {r} power", t - o, w)
            for r, (t, w) in data.overlay.items()
            if np.isfinite(w).any()
        ]
        modes = {ln.mode for ln in data.lanes}
        note = (
            "GPU streams: compute and communication kernels, idle = no GPU activity"
            if modes == {"gpu"}
            else "CPU mode (no GPU kernels): communication = CPU collective ops, compute = leaf CPU ops"
        )
        chart = H.lanes_chart(
            lanes,
            title="Per-rank timeline: compute / communication / idle, with power",
            x_range=(float(x0), float(x1)),
            overlay=overlay,
            overlay_label="power (W)",
            note=note + ("" if overlay else "; no power samples to draw over it"),
            marks=[(float(t - o), f"step {st}") for st, t in data.step_marks],
        )
    else:
        chart = H.empty("Per-rank timeline", data.skipped.get("overlap", "no timed activity in this run"))
    rep.add("Timeline", chart)

    # 2. overlap
    parts = []
    if data.overlap_total is not None and data.overlap_total.height:
        t = data.overlap_total
        parts.append(
            H.table(
                [
                    "rank",
                    "span (ms)",
                    "compute (ms)",
                    "communication (ms)",
                    "overlap %",
                    "exposed comm (ms)",
                    "idle (ms)",
                ],
                [
                    [
                        r["rank"],
                        _ms(r["span_ns"]),
                        _ms(r["compute_ns"]),
                        _ms(r["comm_ns"]),
                        _pct(r["overlap_pct"]),
                        _ms(r["exposed_comm_ns"]),
                        _ms(r["idle_ns"]),
                    ]
                    for r in t.iter_rows(named=True)
                ],
            )
        )
    st = data.overlap_steps
    if st is not None and st.height and st["overlap_pct"].is_not_null().any():
        steps = st["step"].unique().sort().to_list()
        ranks = st["rank"].unique().sort().to_list()[:8]
        values = {}
        for r in ranks:
            sub = dict(st.filter(pl.col("rank") == r).select("step", "overlap_pct").iter_rows())
            values[f"rank {r}"] = [sub.get(s) if sub.get(s) is not None else np.nan for s in steps]
        parts.append(
            H.bar_chart(
                [f"step {s}" for s in steps],
                values,
                title="Overlap per step",
                x_label="overlap of communication with compute (%)",
            )
        )
    elif data.overlap_total is not None:
        parts.append(H.empty("Overlap per step", "no ProfilerStep annotations or no communication per step"))
    else:
        parts.append(H.empty("Overlap", data.skipped.get("overlap", "not computed")))
    rep.add("Overlap", *parts)
    rep.add("Time breakdown", *breakdown_parts(data.breakdown, data.skipped.get("breakdown")))

    # 2b. critical path and what-if (tables; their bars sit in the table cells)
    rep.add("Critical path", *_critical_parts(data))
    if data.what_if is not None or "what_if" in data.skipped:
        rep.add("What-if (PREDICTED)", *_what_if_parts(data), sid="what-if")
    rep.add(
        "GPU idle and launches", *stream_parts(data.idle_time, data.launch, data.skipped, o, data.simulated)
    )

    # 3. bandwidth
    c = data.collectives
    if c is not None and c.height:
        groups = []
        for ct in c["coll_type"].unique().sort().to_list():
            g = c.filter(pl.col("coll_type") == ct)
            tips = [
                f"{ct} · {fmt_bytes(b)} · {bw:.3g} GB/s · rank {r} · group {pg or '-'} · {d / 1e6:,.3f} ms"
                for b, bw, r, pg, d in g.select(
                    "bytes", "busbw_gbps", "rank", "pg_name", "dur_ns"
                ).iter_rows()
            ]
            groups.append(H.Series(str(ct), g["bytes"].to_numpy(), g["busbw_gbps"].to_numpy(), labels=tips))
        chart = H.scatter_chart(
            groups,
            title="Bus bandwidth vs message size, per collective type",
            x_label="message size (nccl-tests convention)",
            y_label="bus bandwidth (GB/s)",
            log_y=True,
            hlines=[H.HLine(g, label) for g, label in data.peaks],
            note="" if data.peaks else "link peak unknown for this device: no peak line",
        )
    else:
        why = data.skipped.get("bandwidth") or (
            "the collectives found have no bus bandwidth (a message size or the group size is unknown; "
            "see the notes)"
        )
        chart = H.empty("Bus bandwidth vs message size", why)
    rep.add("Collective bandwidth", chart)
    if data.stragglers is not None and data.stragglers.height:
        rep.add(
            "Stragglers",
            stragglers_html(data.stragglers),
            note="per process group and rank, over the collectives matched across ranks: how often the rank "
            "started last, and how long after the group's first rank",
        )
    from charllm_trace.render.comm_wait_html import COMM_WAIT_NOTE, comm_wait_parts

    if parts := comm_wait_parts(data.comm_wait):
        rep.add("Waiting and transfer", *parts, note=COMM_WAIT_NOTE, sid="comm-wait")
    from charllm_trace.render.cpu_wait_html import CPU_WAIT_NOTE, cpu_wait_parts

    if parts := cpu_wait_parts(data.cpu_wait):
        rep.add("Is the CPU starving the GPU?", *parts, note=CPU_WAIT_NOTE, sid="cpu-wait")
    from charllm_trace.render.dims_html import DIMS_NOTE, dims_parts

    if parts := dims_parts(data.dims):
        rep.add("By parallel dimension", *parts, note=DIMS_NOTE, sid="dims")
    from charllm_trace.render.flops_html import flops_parts

    rep.add(
        "FLOP/s and MFU", *flops_parts(data.flops, data.skipped.get("flops"), data.simulated), sid="flops"
    )
    from charllm_trace.render.pipeline_html import PIPELINE_NOTE, pipeline_parts

    if parts := pipeline_parts(data.pipeline):
        rep.add("Pipeline bubbles", *parts, note=PIPELINE_NOTE, sid="pipeline")
    if (ranks_steps := rank_step_section(data.overlap_steps)) is not None:
        rep.add(ranks_steps[0], *ranks_steps[1], note=ranks_steps[2], sid="ranks-steps")

    # 4. energy
    e = data.energy_ops
    if e is not None and e.height:
        chart = H.bar_chart(
            e["key"].to_list(),
            {"energy (J)": e["energy_j"].to_list()},
            title="Energy by launching operator (all ranks)",
            x_label="energy (J)",
        )
    else:
        chart = H.empty("Energy by operator", data.skipped.get("energy", "not computed"))
    rep.add("Energy", chart)

    # 5. power, temperature, SM clock
    figs = power_figures(data.devices, data.lanes, data.step_marks, o)
    if not figs:
        figs.append(H.empty("Power, temperature and SM clock", data.skipped.get("power", "no telemetry")))
    rep.add("Power and thermal", *figs)
    from charllm_trace.render.phase_power_html import PHASE_POWER_NOTE, phase_power_parts

    if parts := phase_power_parts(data.phase_power):
        pp = data.phase_power
        title = (
            "Power per microbatch phase"
            if pp is not None and pp.phases.height
            else "Power excursions per step"
        )
        rep.add(title, *parts, note=PHASE_POWER_NOTE, sid="power-phases")
    if data.notes:
        rep.add("Notes", "<ul>" + "".join(f"<li>{H._esc(n)}</li>" for n in data.notes) + "</ul>")
    present = {sid for sid, _, _ in rep.sections}
    rep.sections.insert(0, ("findings", "Findings", findings_html(data.findings, present)))
    return rep.render()


def _who(scope: str, rank: int | None) -> str:
    return "job" if scope == "job" else f"rank {rank}"


def _critical_parts(data: ReportData) -> list[str]:
    from charllm_trace.render import html as H

    p = data.critical_paths
    if p is None or p.height == 0:
        return [f'<p class="empty">{H._esc(data.skipped.get("critical_path", "not computed"))}</p>']
    intro = (
        "The longest chain of dependencies through the execution graph (CPU threads, launches, GPU "
        "streams, synchronisation, collectives across ranks) that ends at the last point of each step "
        "('all': of the whole trace; 'job': of the whole run, across ranks), "
        "and what its time is spent in."
        + (" SIMULATED: times rebuilt from dependencies and durations." if data.simulated else "")
    )
    cats = [c for c in CP_CATEGORIES if (p[f"{c}_ns"].fill_null(0) != 0).any()]
    header = ["path", "step", "span (ms)", "path (ms)"] + [f"{CP_STYLE[c][0]} (ms / %)" for c in cats]
    header.append("breakdown")
    rows = []
    for r in p.iter_rows(named=True):
        length = r["length_ns"] or 0
        row: list[object] = [
            _who(r["scope"], r["rank"]),
            "all" if r["step"] is None else r["step"],
            _ms(r["span_ns"]),
            _ms(r["length_ns"]),
        ]
        for c in cats:
            v = r[f"{c}_ns"]
            row.append(f"{_ms(v)} / {_pct(100.0 * v / length) if length and v is not None else ''}")
        row.append(
            H.stack_bar(
                [
                    (f"{CP_STYLE[c][0]}: {_ms(r[f'{c}_ns'])} ms", r[f"{c}_ns"], CP_STYLE[c][1])
                    for c in CP_CATEGORIES
                ],
                total=length or None,
            )
        )
        rows.append(row)
    parts = [
        f'<p class="note">{H._esc(intro)}</p>',
        H.table(header, rows, scroll=True),
        H.legend([CP_STYLE[c] for c in cats]),
    ]
    ops = data.critical_ops
    if ops is not None and ops.height:
        only_job = set(ops["scope"].to_list()) == {"job"}
        parts.append(
            "<h3>Top operators on the critical path (whole trace"
            + (", the job's path; each rank's list is in analyze --format json" if only_job else "")
            + ")</h3>"
        )
        parts.append(
            H.table(
                ["path", "operator", "category", "time (ms)", "% of path", "path edges"],
                [
                    [
                        _who(r["scope"], r["rank"]),
                        r["name"] or "",
                        CP_STYLE.get(r["category"], (r["category"] or "",))[0],
                        _ms(r["time_ns"]),
                        _pct(r["pct"]),
                        r["count"],
                    ]
                    for r in ops.iter_rows(named=True)
                ],
            )
        )
    parts.append(_notes_list(data.critical_notes))
    return parts
