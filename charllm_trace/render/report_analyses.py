"""The HTML report's sections of the registered analyses (``analysis/registry.py``: each entry's
``html`` names its function here or in its own module): each takes the report's data
(``report.ReportData``) and adds its sections to the page, in the registry's ``html_at`` order."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from charllm_trace.analysis.results import CP_CATEGORIES
from charllm_trace.render import html as H
from charllm_trace.render.breakdown_html import breakdown_parts
from charllm_trace.render.categories import CP_STYLE
from charllm_trace.render.report_sections import ms as _ms
from charllm_trace.render.report_sections import notes_list as _notes_list
from charllm_trace.render.report_sections import pct as _pct
from charllm_trace.render.report_sections import power_figures, stragglers_html
from charllm_trace.render.report_sections import what_if_parts as _what_if_parts
from charllm_trace.render.report_streams import stream_parts
from charllm_trace.render.svg import fmt_bytes


def overlap_section(data: Any, rep: H.HtmlReport) -> None:
    """Overlap: the whole-trace table and the overlap per step."""
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


def breakdown_section(data: Any, rep: H.HtmlReport) -> None:
    rep.add("Time breakdown", *breakdown_parts(data.breakdown, data.skipped.get("breakdown")))


def critical_path_section(data: Any, rep: H.HtmlReport) -> None:
    rep.add("Critical path", *_critical_parts(data))


def what_if_section(data: Any, rep: H.HtmlReport) -> None:
    if data.what_if is not None or "what_if" in data.skipped:
        rep.add("What-if (PREDICTED)", *_what_if_parts(data), sid="what-if")


def streams_section(data: Any, rep: H.HtmlReport) -> None:
    """GPU idle time per stream and launches (one section for both analyses)."""
    o = data.origin_ns or 0
    rep.add(
        "GPU idle and launches", *stream_parts(data.idle_time, data.launch, data.skipped, o, data.simulated)
    )


def bandwidth_section(data: Any, rep: H.HtmlReport) -> None:
    """Bus bandwidth vs message size, and the stragglers."""
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


def energy_section(data: Any, rep: H.HtmlReport) -> None:
    """Energy by launching operator."""
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


def power_section(data: Any, rep: H.HtmlReport) -> None:
    """Power, temperature and SM clock, with throttle periods."""
    # 5. power, temperature, SM clock
    figs = power_figures(data.devices, data.lanes, data.step_marks, data.origin_ns or 0)
    if not figs:
        figs.append(H.empty("Power, temperature and SM clock", data.skipped.get("power", "no telemetry")))
    rep.add("Power and thermal", *figs)


def _who(scope: str, rank: int | None) -> str:
    return "job" if scope == "job" else f"rank {rank}"


def _critical_parts(data: Any) -> list[str]:
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
