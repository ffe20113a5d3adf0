"""The HTML report's charts: inline SVG, no script (the page is :mod:`charllm_trace.render.html`).

Chart primitives (each returns an HTML fragment holding one ``<svg>``):

- :func:`line_chart` — time series on a left and an optional right axis, with shaded
  spans (e.g. throttle periods);
- :func:`lanes_chart` — stacked timeline lanes (per rank: compute / communication /
  idle rows) with series (e.g. power) drawn over them on a right axis;
- :func:`bar_chart` — horizontal bars, one or several values per category;
- :func:`scatter_chart` — points per group on a linear or log x axis with horizontal
  reference lines (e.g. bus bandwidth vs message size with the link peak);
- :func:`stack_bar` — one small stacked bar (e.g. a critical path's breakdown by
  category) to put in a table cell (:class:`Html` cells are not escaped), with
  :func:`legend` for its colours.

Renderers never compute figures: they receive already-computed values and only map
them to pixels. To keep a page small on traces with millions of intervals, lanes are
drawn per pixel column, shaded by the share of that column's time spent in the state
(so a column of tiny kernels with long gaps is pale, not solid), and long series are
reduced to the min and max per pixel column, which changes nothing that can be seen
(:mod:`charllm_trace.render.svg` has these reductions, the scales, axes and legends).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from charllm_trace.render.marks import MARKERS, marker, vlines
from charllm_trace.render.svg import (
    MB,
    ML,
    MR,
    MT,
    Scale,
    W,
    axis_x,
    axis_y,
    coverage,
    empty,
    esc,
    figure,
    finite,
    fmt_num,
    path_d,
    reduce_line,
    swatches,
    value_range,
)

PALETTE = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#eeca3b",
    "#9d755d",
    "#ff9da6",
    "#79706e",
)
_ABBR = {"compute": "comp", "communication": "comm", "idle": "idle", "memory": "mem"}
STATE_COLORS = {"compute": "#4c78a8", "communication": "#f58518", "idle": "#bab0ac", "memory": "#72b7b2"}


# ---------------------------------------------------------------------------
# Data holders
# ---------------------------------------------------------------------------


@dataclass
class Series:
    """A line (or, in a scatter, a group of points)."""

    name: str
    x: Sequence[float] | np.ndarray
    y: Sequence[float] | np.ndarray
    color: str | None = None
    axis: str = "left"  # "left" or "right"
    labels: Sequence[str] | None = None  # a scatter's per-point tooltips


@dataclass
class Span:
    """A shaded x range (e.g. a throttle period)."""

    start: float
    end: float
    label: str = ""


@dataclass
class HLine:
    """A horizontal reference line (e.g. a link peak)."""

    y: float
    label: str
    color: str = "#d62728"


@dataclass
class LaneRow:
    """One row of a lane: intervals in one state."""

    state: str
    starts: Sequence[float] | np.ndarray
    ends: Sequence[float] | np.ndarray


@dataclass
class Lane:
    name: str
    rows: list[LaneRow] = field(default_factory=list)


# ---------------------------------------------------------------------------
# Primitives
# ---------------------------------------------------------------------------


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    y_label: str,
    x_label: str = "time",
    y2_label: str | None = None,
    spans: Sequence[Span] = (),
    span_label: str = "",
    x_kind: str = "time",  # "time" (ns offsets) or "num"
    x_range: tuple[float, float] | None = None,
    height: int = 240,
    note: str = "",
    window: tuple[float, float, str] | None = None,
    marks: Sequence[tuple[float, str]] = (),
) -> str:
    """Lines on a left (and optional right) axis over shaded spans; ``window``: an x range drawn
    as a band with its label (e.g. the traced window inside a longer telemetry record);
    ``marks``: vertical lines with a label."""
    xs = [np.asarray(s.x, dtype=np.float64) for s in series]
    ys = [np.asarray(s.y, dtype=np.float64) for s in series]
    if not any(np.isfinite(y).any() for y in ys if y.size):
        return empty(title, "no samples to draw")
    x0, x1 = x_range if x_range else value_range(xs)
    top, bottom = MT, height - MB
    sx = Scale(x0, x1, ML, W - MR)
    left = [y for s, y in zip(series, ys, strict=True) if s.axis != "right"]
    right = [y for s, y in zip(series, ys, strict=True) if s.axis == "right"]
    yl = value_range(left, pad=0.05)
    sy = Scale(yl[0], yl[1], bottom, top)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    parts += axis_x(sx, x0, x1, bottom, top, x_label, x_kind)
    parts += axis_y(sy, yl[0], yl[1], ML, y_label, False, True)
    sr = None
    if right:
        yr = value_range(right, pad=0.05)
        sr = Scale(yr[0], yr[1], bottom, top)
        parts += axis_y(sr, yr[0], yr[1], W - MR, y2_label or "", True, False)
    parts.append('<g class="plot">')
    if window is not None:
        a, b = float(sx(max(window[0], x0))), float(sx(min(window[1], x1)))
        if b > a:
            parts.append(
                f'<rect class="window" x="{a:.1f}" y="{top}" width="{max(b - a, 1):.1f}" height="{bottom - top}" '
                f'fill="#4c78a8" fill-opacity="0.10" stroke="#4c78a8" stroke-dasharray="3 3">'
                f"<title>{esc(window[2])}</title></rect>"
            )
    parts += vlines(marks, sx, x0, x1, top, bottom)
    for sp in spans:
        a, b = float(sx(max(sp.start, x0))), float(sx(min(sp.end, x1)))
        if b > a:
            parts.append(
                f'<rect class="span" x="{a:.1f}" y="{top}" width="{max(b - a, 1):.1f}" height="{bottom - top}" '
                f'fill="#d62728" fill-opacity="0.15"><title>{esc(sp.label)}</title></rect>'
            )
    legend = []
    for i, (s, x, y) in enumerate(zip(series, xs, ys, strict=True)):
        x, y = finite(x, y)
        if x.size == 0:
            continue
        color = s.color or PALETTE[i % len(PALETTE)]
        scale = sr if (s.axis == "right" and sr is not None) else sy
        order = np.argsort(x, kind="stable")
        px, py = reduce_line(sx(x[order]), scale(y[order]), W)
        parts.append(
            f'<path class="series" d="{path_d(px, py)}" fill="none" stroke="{color}" stroke-width="1.5">'
            f"<title>{esc(s.name)}</title></path>"
        )
        legend.append((s.name + (" (right axis)" if s.axis == "right" and sr is not None else ""), color))
    if spans:
        legend.append((span_label or "shaded", "rgba(214,39,40,0.3)"))
    if window is not None:
        legend.append((window[2], "rgba(76,120,168,0.3)"))
    parts.append("</g></svg>")
    return figure("line", title, "".join(parts), swatches(legend), note)


def lanes_chart(
    lanes: Sequence[Lane],
    *,
    title: str,
    x_range: tuple[float, float],
    overlay: Sequence[Series] = (),
    overlay_label: str = "",
    x_label: str = "time",
    note: str = "",
    marks: Sequence[tuple[float, str]] = (),
) -> str:
    """Stacked lanes of intervals (one row per state) with series drawn over them on a right axis;
    ``marks``: vertical lines with a label (e.g. the start of each step)."""
    if not lanes:
        return empty(title, "no timed activity to draw")
    row_h, gap = (18, 12) if len(lanes) <= 4 else (12, 8)
    n_rows = sum(max(len(lane.rows), 1) for lane in lanes)
    height = MT + n_rows * row_h + len(lanes) * gap + MB + 4
    top, bottom = MT, height - MB
    x0, x1 = x_range
    sx = Scale(x0, x1, ML + 40, W - MR)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    parts += axis_x(sx, x0, x1, bottom, top, x_label, "time")
    parts.append('<g class="plot">')
    y = top + gap / 2
    states_seen: list[str] = []
    for lane in lanes:
        parts.append(
            f'<text x="{ML - 20}" y="{y + len(lane.rows) * row_h / 2 + 4:.1f}" text-anchor="end" '
            f'font-weight="600">{esc(lane.name)}</text>'
        )
        for row in lane.rows:
            color = STATE_COLORS.get(row.state, "#999")
            if row.state not in states_seen:
                states_seen.append(row.state)
            parts.append(
                f'<text x="{ML + 36}" y="{y + row_h - 3:.1f}" text-anchor="end" font-size="9">{esc(_ABBR.get(row.state, row.state[:5]))}</text>'
            )
            px0 = ML + 40
            cov = coverage(
                np.asarray(row.starts, dtype=np.float64),
                np.asarray(row.ends, dtype=np.float64),
                x0,
                x1,
                W - MR - px0,
            )
            # each pixel column is shaded by the share of its time spent in this state
            level = np.where(cov > 0, np.maximum(np.ceil(cov * 10 - 1e-9), 1) / 10, 0.0)
            for lv in np.unique(level[level > 0]).tolist():
                cols = np.flatnonzero(level == lv)
                starts = cols[np.r_[True, np.diff(cols) > 1]]
                ends = cols[np.r_[np.diff(cols) > 1, True]] + 1
                d = "".join(
                    f"M{px0 + p},{y:.1f}h{q - p}v{row_h - 2}h{p - q}z"
                    for p, q in zip(starts.tolist(), ends.tolist(), strict=True)
                )
                parts.append(
                    f'<path class="lane" data-row="{esc(lane.name)}|{esc(row.state)}" d="{d}" fill="{color}" '
                    f'fill-opacity="{0.15 + 0.85 * lv:.2f}"><title>{esc(lane.name)}: {esc(row.state)} '
                    f"({lv * 100 - 10:.0f}-{lv * 100:.0f} % of each pixel's time)</title></path>"
                )
            y += row_h
        y += gap
    legend = [(s, STATE_COLORS.get(s, "#999")) for s in states_seen]
    parts += vlines(marks, sx, x0, x1, top, bottom)
    if marks:
        legend.append(("step start", "#333"))
    if overlay:
        ys = [np.asarray(s.y, dtype=np.float64) for s in overlay]
        yr = value_range(ys, pad=0.05)
        sr = Scale(yr[0], yr[1], bottom, top)
        parts.append("</g>")
        parts += axis_y(sr, yr[0], yr[1], W - MR, overlay_label, True, False)
        parts.append('<g class="plot overlay">')
        for i, s in enumerate(overlay):
            x, yv = finite(np.asarray(s.x, dtype=np.float64), np.asarray(s.y, dtype=np.float64))
            keep = (x >= x0) & (x <= x1)
            x, yv = x[keep], yv[keep]
            if x.size == 0:
                continue
            color = s.color or ("#d62728", "#9467bd", "#8c564b", "#e377c2")[i % 4]
            order = np.argsort(x, kind="stable")
            px, py = reduce_line(sx(x[order]), sr(yv[order]), W)
            parts.append(
                f'<path class="series" d="{path_d(px, py)}" fill="none" stroke="{color}" stroke-width="1.6">'
                f"<title>{esc(s.name)}</title></path>"
            )
            legend.append((s.name, color))
    parts.append("</g></svg>")
    return figure("lanes", title, "".join(parts), swatches(legend), note)


def bar_chart(
    categories: Sequence[str],
    values: dict[str, Sequence[float]],
    *,
    title: str,
    x_label: str,
    note: str = "",
    colors: dict[str, str] | None = None,
) -> str:
    """Horizontal bars: one bar per (category, value name); several value names are grouped."""
    if not categories or not values:
        return empty(title, "nothing to draw")
    names = list(values)
    arrs = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    bar_h = 14 if len(names) == 1 else 9
    group_h = bar_h * len(names) + 6
    height = MT + group_h * len(categories) + MB + 4
    top, bottom = MT, height - MB
    label_w = 230
    hi = max((float(np.nanmax(a)) for a in arrs.values() if np.isfinite(a).any()), default=1.0)
    lo = min(0.0, min((float(np.nanmin(a)) for a in arrs.values() if np.isfinite(a).any()), default=0.0))
    hi = hi if hi > lo else lo + 1.0
    sx = Scale(lo, hi * 1.05, label_w, W - MR)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    ax = axis_x(sx, lo, hi * 1.05, bottom, top, x_label, "num")
    parts += [p.replace(f'x1="{ML}"', f'x1="{label_w}"') for p in ax]
    parts.append('<g class="plot">')
    for i, cat in enumerate(categories):
        gy = top + i * group_h + 3
        short = cat if len(cat) <= 38 else cat[:36] + "…"
        parts.append(
            f'<text x="{label_w - 6}" y="{gy + group_h / 2 + 1:.1f}" text-anchor="end"><title>{esc(cat)}</title>{esc(short)}</text>'
        )
        for j, nm in enumerate(names):
            v = arrs[nm][i]
            if not np.isfinite(v):
                continue
            a, b = float(sx(min(0.0, v))), float(sx(max(0.0, v)))
            color = (colors or {}).get(nm) or PALETTE[j % len(PALETTE)]
            parts.append(
                f'<rect class="bar" x="{a:.1f}" y="{gy + j * bar_h:.1f}" width="{max(b - a, 1):.1f}" '
                f'height="{bar_h - 1}" fill="{color}"><title>{esc(cat)} · {esc(nm)}: {esc(fmt_num(round(v, 3)))}</title></rect>'
            )
    parts.append("</g></svg>")
    legend = (
        swatches([(n, (colors or {}).get(n) or PALETTE[j % len(PALETTE)]) for j, n in enumerate(names)])
        if len(names) > 1
        else ""
    )
    return figure("bar", title, "".join(parts), legend, note)


def scatter_chart(
    groups: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = True,
    log_y: bool = False,
    hlines: Sequence[HLine] = (),
    height: int = 300,
    note: str = "",
) -> str:
    """Points per group (x log-scaled by default, labelled as byte sizes; y log-scaled with
    ``log_y``) with reference lines. Each group has its own colour and marker shape, groups are
    nudged apart by a pixel or two and the smaller ones drawn last, so none hides under another;
    every drawn point has a tooltip (the group's ``labels``, or its values)."""
    xs = [np.asarray(g.x, dtype=np.float64) for g in groups]
    ys = [np.asarray(g.y, dtype=np.float64) for g in groups]
    labs = [list(g.labels) if g.labels is not None else None for g in groups]
    pts, tips = [], []
    for x, y, lab in zip(xs, ys, labs, strict=True):
        keep = np.isfinite(x) & np.isfinite(y)
        if log_x:
            keep &= x > 0
        if log_y:
            keep &= y > 0
        pts.append((x[keep], y[keep]))
        tips.append([lab[k] for k in np.flatnonzero(keep).tolist()] if lab is not None else None)
    if not any(x.size for x, _ in pts):
        return empty(title, "no points to draw")
    allx = np.concatenate([x for x, _ in pts])
    x0, x1 = float(allx.min()), float(allx.max())
    if log_x:
        x0, x1 = x0 / 2, x1 * 2
    else:  # linear: a margin, so no point sits on an axis
        x0, x1 = value_range([allx], pad=0.06)
    href = np.asarray([h.y for h in hlines], dtype=np.float64)
    if log_y:
        ally = np.concatenate([y for _, y in pts] + [href[href > 0]])
        ylo, yhi = float(ally.min()) / 1.5, float(ally.max()) * 1.5
    else:
        ylo, yhi = value_range([y for _, y in pts] + [href], pad=0.08, zero=True)
    top, bottom = MT, height - MB
    sx = Scale(x0, x1, ML, W - MR, log=log_x)
    sy = Scale(ylo, yhi, bottom, top, log=log_y)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    parts += axis_x(sx, x0, x1, bottom, top, x_label, "log" if log_x else "num")
    parts += axis_y(sy, ylo, yhi, ML, y_label + (" (log scale)" if log_y else ""), False, True, log=log_y)
    parts.append('<g class="plot">')
    for h in hlines:
        py = float(sy(h.y))
        parts.append(
            f'<line class="hline" x1="{ML}" x2="{W - MR}" y1="{py:.1f}" y2="{py:.1f}" stroke="{h.color}" '
            f'stroke-width="1.5" stroke-dasharray="6 4"><title>{esc(h.label)}</title></line>'
            f'<text x="{W - MR - 4}" y="{py - 4:.1f}" text-anchor="end" fill="{h.color}">{esc(h.label)}</text>'
        )
    n = len(groups)
    order = sorted(range(n), key=lambda i: -pts[i][0].size)  # the biggest groups first, under the others
    for i in order:
        g, (x, y) = groups[i], pts[i]
        if x.size == 0:
            continue
        color = g.color or PALETTE[i % len(PALETTE)]
        shape = MARKERS[i % len(MARKERS)]
        px, py = sx(x) + (i - (n - 1) / 2) * 1.5, sy(y)
        # points that fall on the same pixel are drawn once; the tooltip counts them
        _, key, cnt = np.unique(
            np.round(px).astype(np.int64) * 100_000 + np.round(py).astype(np.int64),
            return_index=True, return_counts=True,
        )  # fmt: skip
        tip = tips[i]
        marks = []
        for k, c in zip(key.tolist(), cnt.tolist(), strict=True):
            t = tip[k] if tip is not None else f"{g.name}: {fmt_num(float(x[k]))}, {fmt_num(float(y[k]))}"
            if c > 1:
                t += f" (+{c - 1} more at this point)"
            marks.append(marker(shape, float(px[k]), float(py[k]), t))
        parts.append(
            f'<g class="points" data-marker="{shape}" fill="{color}" color="{color}" fill-opacity="0.8">'
            f"{''.join(marks)}</g>"
        )
    legend = [
        (f"{g.name} ({pts[i][0].size})", g.color or PALETTE[i % len(PALETTE)])
        for i, g in enumerate(groups)
        if pts[i][0].size
    ]
    parts.append("</g></svg>")
    return figure("scatter", title, "".join(parts), swatches(legend), note)


class Html(str):
    """A fragment of markup to put in a :func:`table` cell as it is (not escaped)."""


def _cell(v: object) -> str:
    if isinstance(v, Html):
        return f'<td class="left">{v}</td>'
    return f"<td>{esc(v)}</td>"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], *, scroll: bool = False) -> str:
    """A small data table (values are shown as given; :class:`Html` values as markup).
    ``scroll``: wrapped in a box that scrolls sideways when the table is wider than the page."""
    th = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(v) for v in r) + "</tr>" for r in rows)
    out = f'<table class="data"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
    return f'<div class="scroll">{out}</div>' if scroll else out


def stack_bar(
    parts: Sequence[tuple[str, float, str]], *, total: float | None = None, width: int = 260, height: int = 12
) -> Html:
    """One horizontal stacked bar as an inline SVG: ``parts`` are (label, value, colour), drawn
    left to right in proportion to ``total`` (default: their sum); each piece has its label and
    value as a tooltip. Values that are not positive are not drawn."""
    vals = [(lab, float(v), c) for lab, v, c in parts if v is not None and math.isfinite(v) and v > 0]
    tot = float(total) if total else sum(v for _, v, _ in vals)
    out = [
        f'<svg class="stack" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><rect x="0" y="0" width="{width}" height="{height}" fill="#f4f4f4"/>'
    ]
    x = 0.0
    for lab, v, c in vals:
        w = width * v / tot if tot > 0 else 0.0
        if w <= 0:
            continue
        out.append(
            f'<rect class="piece" x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{c}">'
            f"<title>{esc(lab)}</title></rect>"
        )
        x += w
    out.append("</svg>")
    return Html("".join(out))


def legend(items: Sequence[tuple[str, str]]) -> str:
    """Colour swatches with their names, e.g. for :func:`stack_bar`."""
    return swatches(list(items)).replace('class="legend"', 'class="legend" style="margin-left:0"')
