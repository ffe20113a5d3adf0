"""Sections of the HTML report beyond the charts of ``render/report.py``: the findings at the top and
the stragglers table. Formatting only: the sentences come from ``analysis.findings``, the
numbers from the analyses' frames."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from charllm_trace.analysis.findings import Finding
from charllm_trace.render import charts as H
from charllm_trace.render import units
from charllm_trace.render.charts import table
from charllm_trace.render.coltable import HTML_UNITS, Layout, Show
from charllm_trace.render.report_views import DeviceSeries, RankLanes
from charllm_trace.render.svg import esc

#: Section anchors a finding may link to, and the words of the link.
SECTION_WORDS = {
    "overlap": "overlap",
    "collective-bandwidth": "bandwidth",
    "stragglers": "stragglers",
    "power-and-thermal": "power",
    "energy": "energy",
    "power-phases": "power per phase",
}


def findings_html(found: Sequence[Finding], present: set[str]) -> str:
    """A list of the findings, each linking to its section (when the page has it)."""
    if not found:
        return '<p class="note">Nothing to report: no analysis could be computed for this run.</p>'
    items = []
    for f in found:
        link = (
            f' <a class="more" href="#{esc(f.section)}">{esc(SECTION_WORDS.get(f.section, f.section))} →</a>'
            if f.section in present
            else ""
        )
        items.append(f'<li data-section="{esc(f.section)}">{esc(f.text)}{link}</li>')
    return f'<ul class="findings">{"".join(items)}</ul>'


def stragglers_html(sg: pl.DataFrame | None, top: int = 16) -> str:
    """The stragglers table (ranks that arrive last most often first)."""
    if sg is None or sg.height == 0:
        return ""
    rows = []
    for r in (
        sg.sort(["n_last", "mean_late_ns"], descending=True, nulls_last=True).head(top).iter_rows(named=True)
    ):
        rows.append(
            [
                r["pg_name"] or "-",
                r["dim"] or "-",
                r["rank"],
                r["n_matched"],
                r["n_last"],
                "" if r["last_pct"] is None else f"{r['last_pct']:.1f}",
                "" if r["mean_late_ns"] is None else f"{r['mean_late_ns'] / 1e6:,.3f}",
                "" if r["max_late_ns"] is None else f"{r['max_late_ns'] / 1e6:,.3f}",
            ]
        )
    head = ["group", "dim", "rank", "matched", "arrived last", "last %", "mean late (ms)", "max late (ms)"]
    more = f'<p class="note">top {top} of {sg.height} (group, rank) rows</p>' if sg.height > top else ""
    return table(head, rows) + more


def power_figures(
    devices: Sequence[DeviceSeries], lanes: Sequence[RankLanes], step_marks: Sequence[tuple[int, int]], o: int
) -> list[str]:
    """Per GPU: power (W, left axis) with temperature (°C, right axis), and the SM clock (MHz),
    on the timeline's time origin, with the traced window and the step starts marked."""
    figs = []
    traced = None
    if lanes:  # the timeline's window, marked on the longer telemetry record
        traced = (
            float(min(ln.window[0] for ln in lanes) - o),
            float(max(ln.window[1] for ln in lanes) - o),
            "traced window (the timeline above)",
        )
    steps = [(float(t - o), f"step {st}") for st, t in step_marks]
    for d in devices:
        t = d.t - o
        xr = (float(min(t.min(), traced[0])), float(max(t.max(), traced[1]))) if traced and t.size else None
        throttle = [H.Span(a - o, b - o, why) for a, b, why in d.throttle]
        shared: dict[str, Any] = {"spans": throttle, "x_range": xr, "window": traced, "marks": steps}
        figs.append(
            H.line_chart(
                [
                    H.Series("power (W)", t, d.power_w, color="#d62728"),
                    H.Series("temperature (°C)", t, d.temp_c, color="#ff7f0e", axis="right"),
                ],
                title=f"rank {d.rank} · GPU {d.device}: power and temperature",
                y_label="power (W)",
                y2_label="temperature (°C)",
                span_label="throttled (power / thermal / hardware slowdown)",
                **shared,
            )
        )
        figs.append(
            H.line_chart(
                [H.Series("SM clock (MHz)", t, d.sm_clock_mhz, color="#1f77b4")],
                title=f"rank {d.rank} · GPU {d.device}: SM clock",
                y_label="SM clock (MHz)",
                span_label="throttled",
                height=170,
                **shared,
            )
        )
    return figs


def ms(ns: float | None) -> str:
    return units.ms(ns, missing="", grouped=True)


def pct(v: float | None) -> str:
    return "" if v is None or v != v else f"{v:.2f}"


def html_layout(table: dict[str, pl.DataType], shows: Sequence[Show | str]) -> Layout:
    """A table of the report from the column declarations (:class:`Layout`): units named in full
    in the headers, times in ms, percentages with two decimals, bandwidths with four digits, an
    empty cell for a null."""
    return Layout(table, shows, units=HTML_UNITS, missing="", time=ms, formats={"%": pct, "GB/s": "{:.4g}"})


def html_rows(layout: Layout, df: pl.DataFrame, scroll: bool = True) -> str:
    """``df`` as a report table under ``layout`` (``scroll``: scrolling sideways when wider than
    the page)."""
    return table([h for h, _ in layout.heads], layout.rows(df), scroll=scroll)


def notes_list(notes: list[str]) -> str:
    from charllm_trace.render import html as H

    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{H._esc(n)}</li>" for n in notes) + "</ul>"


def what_if_parts(data: Any) -> list[str]:
    from charllm_trace.render import html as H

    w = data.what_if
    if w is None:
        return [f'<p class="empty">{esc(data.skipped.get("what_if", "not computed"))}</p>']
    from charllm_trace.analysis.whatif_keys import describe
    from charllm_trace.render.whatif_text import basis, headline

    wi = data.what_if_result
    factors = describe(data.what_if_factors)
    parts = [
        f'<p class="predicted">PREDICTED, not measured: {esc(factors)}; the execution graph re-timed, '
        "every dependency honoured.</p>"
    ]
    if wi is not None:
        parts.append(f'<p class="predicted"><b>{esc(headline(wi))}</b></p>')
    rows = [
        [
            r["rank"],
            "all" if r["step"] is None else r["step"],
            ms(r["measured_ns"]),
            ms(r["predicted_ns"]),
            "" if r["change_pct"] is None else f"{r['change_pct']:+.2f}",
            ms(r["measured_exposed_comm_ns"]),
            ms(r["predicted_exposed_comm_ns"]),
            pct(r["measured_overlap_pct"]),
            pct(r["predicted_overlap_pct"]),
        ]
        for r in w.iter_rows(named=True)
    ]
    parts.append(
        H.table(
            [
                "rank",
                "step",
                "measured (ms)",
                "predicted (ms)",
                "change %",
                "measured exposed comm (ms)",
                "predicted exposed comm (ms)",
                "measured overlap %",
                "predicted overlap %",
            ],
            rows,
            scroll=True,
        )
    )
    notes = list(data.what_if_notes)
    rests = basis(wi) if wi is not None else None
    if rests is not None:
        notes.insert(0, rests)
    elif data.what_if_fixed_wait_pct is not None:
        notes.insert(
            0,
            f"{data.what_if_fixed_wait_pct:.1f} % of the measured critical path is waiting the trace does not explain; "
            "it is kept as measured in the prediction",
        )
    parts.append(notes_list(notes))
    return parts
