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
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.analysis.energy import IDLE
from charllm_trace.analysis.findings import Finding, findings
from charllm_trace.analysis.idle_results import IdleTimeResult, LaunchResult
from charllm_trace.analysis.registry import ANALYSES, resolve, shown
from charllm_trace.analysis.results import BreakdownResult, RunAnalysis, WhatIfResult
from charllm_trace.core.model import Run
from charllm_trace.render import html as H
from charllm_trace.render.report_analyses import CP_STYLE as _CP_STYLE
from charllm_trace.render.report_ranks import rank_step_section
from charllm_trace.render.report_sections import findings_html
from charllm_trace.render.report_views import (  # noqa: F401 - the views' names are part of this module's interface
    MAX_DEVICE_CHARTS,
    MAX_LANES,
    DeviceSeries,
    RankLanes,
    ReportViews,
    drawn_run,
    report_views,
)

TOP_OPS = 15  # operators in the energy chart
CP_TOP_OPS = 10  # operators listed per critical path
CP_MAX_RANK_OPS = 4  # with more ranks, the operators of the job's critical path only

#: Label and colour of each critical-path category (``CP_CATEGORIES``; render/report_analyses.py).
CP_STYLE = _CP_STYLE


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
    results: dict[str, Any] = field(default_factory=dict)  # every analysis' result, by registry name
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
    data.results = {a.name: a.get(an) for a in ANALYSES}  # what the newer sections draw
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
    """One self-contained HTML page of ``data``: the timeline, each registered analysis' sections
    (``analysis/registry.py``, in their ``html_at`` order, the ranks-by-steps heatmaps among them),
    the notes, and the findings first."""
    rep = H.HtmlReport(
        data.title,
        f"{len(data.ranks)} rank(s) · source: {_name(data.source)} · times from the run's first event"
        + (" · SIMULATED timeline: the source has no timestamps" if data.simulated else ""),
    )
    _timeline(data, rep)
    own = [(RANKS_STEPS_AT, _ranks_steps)]
    sections = sorted([(a.html_at, resolve(ref)) for a, ref in shown("html")] + own, key=lambda x: x[0])
    for _, section in sections:
        section(data, rep)
    if data.notes:
        rep.add("Notes", "<ul>" + "".join(f"<li>{H._esc(n)}</li>" for n in data.notes) + "</ul>")
    present = {sid for sid, _, _ in rep.sections}
    rep.sections.insert(0, ("findings", "Findings", findings_html(data.findings, present)))
    return rep.render()


#: Where the ranks-by-steps heatmaps sit among the analyses' sections (``Analysis.html_at``).
RANKS_STEPS_AT = 9.5


def _ranks_steps(data: ReportData, rep: H.HtmlReport) -> None:
    if (ranks_steps := rank_step_section(data.overlap_steps)) is not None:
        rep.add(ranks_steps[0], *ranks_steps[1], note=ranks_steps[2], sid="ranks-steps")


def _timeline(data: ReportData, rep: H.HtmlReport) -> None:
    """The per-rank lanes (compute / communication / idle) with power over them."""
    o = data.origin_ns or 0
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
