"""A self-contained HTML report: inline CSS and inline SVG, no script, nothing fetched.

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
reduced to the min and max per pixel column, which changes nothing that can be seen.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

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

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:16px 28px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#cfd8dc;font-size:13px}
main{padding:8px 28px 40px;max-width:1100px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;margin:18px 0;padding:10px 18px 16px}
section h2{font-size:17px;margin:8px 0 6px}
p.note{color:#555;font-size:13px;margin:4px 0}
p.empty{color:#8a6d3b;background:#fcf8e3;border:1px solid #faebcc;padding:8px 10px;border-radius:4px;font-size:13px}
figure.chart{margin:10px 0}
figure.chart figcaption{font-size:13px;font-weight:600;margin-bottom:2px}
svg{display:block;font-size:11px}
svg .axis line,svg .axis path{stroke:#888;shape-rendering:crispEdges}
svg .axis line.gridline{stroke:#eee}
svg text{fill:#333}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:2px 0 0 60px}
.legend span.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px;border-radius:2px}
table.data{border-collapse:collapse;font-size:12px;margin:8px 0}
table.data th,table.data td{border:1px solid #ddd;padding:3px 8px;text-align:right}
table.data th{background:#f2f2f2} table.data td:first-child,table.data th:first-child{text-align:left}
table.data td.left{text-align:left}
div.scroll{overflow-x:auto}
svg.stack{display:inline-block;vertical-align:middle}
nav.toc{font-size:13px;margin:12px 0 0} nav.toc a{color:#1f5f9e;margin-right:14px;text-decoration:none}
p.predicted{font-weight:600;color:#8a4b00}
"""

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
# Scales and ticks
# ---------------------------------------------------------------------------


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:.0f}"


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def fmt_time_ns(v: float, span: float) -> str:
    """A time offset in ns, in the unit that suits ``span``."""
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if span >= 5 * div or unit == "µs":
            x = v / div
            digits = 0 if span / div >= 50 else (1 if span / div >= 5 else 2)
            return f"{x:.{digits}f} {unit}"
    return f"{v:.0f} ns"


def fmt_num(v: float) -> str:
    a = abs(v)
    if a >= 1e12:
        return f"{v / 1e12:g}T"
    if a >= 1e9:
        return f"{v / 1e9:g}G"
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def fmt_bytes(v: float) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= div:
            return f"{v / div:g} {unit}"
    return f"{v:g} B"


class _Scale:
    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool = False) -> None:
        if log:
            lo, hi = math.log10(max(lo, 1e-300)), math.log10(max(hi, 1e-300))
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log

    def __call__(self, v: np.ndarray | float) -> np.ndarray:
        a = np.asarray(v, dtype=np.float64)
        if self.log:
            a = np.log10(np.maximum(a, 1e-300))
        return self.p0 + (a - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _finite(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(x) & np.isfinite(y)
    return x[ok], y[ok]


def _reduce_line(px: np.ndarray, py: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep, per pixel column, the first, min, max and last point (order preserved)."""
    if px.size <= 4 * width:
        return px, py
    col = np.floor(px).astype(np.int64)
    order = np.lexsort((px, col))
    px, py, col = px[order], py[order], col[order]
    starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    ends = np.r_[starts[1:], px.size] - 1
    imin = np.minimum.reduceat(py, starts)
    imax = np.maximum.reduceat(py, starts)
    # positions of min and max within each column
    keep = np.zeros(px.size, bool)
    keep[starts] = True
    keep[ends] = True
    seg = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, px.size]))
    keep |= py == imin[seg]
    keep |= py == imax[seg]
    return px[keep], py[keep]


def _coverage(starts: np.ndarray, ends: np.ndarray, x0: float, x1: float, n: int) -> np.ndarray:
    """Share (0..1) of each of ``n`` equal pixel columns over [x0, x1) covered by the intervals."""
    ok = ends > starts
    s, e = _merge_px(starts[ok], ends[ok], snap=False)
    edges = np.linspace(x0, x1, n + 1)
    cum = np.r_[0.0, np.cumsum(e - s)]

    def covered_before(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right")
        over = np.where(k > 0, np.maximum(e[np.maximum(k - 1, 0)] - t, 0.0), 0.0) if s.size else 0.0
        return cum[k] - over

    width = (x1 - x0) / n if x1 > x0 else 1.0
    return np.clip(np.diff(covered_before(edges)) / width, 0.0, 1.0)


def _merge_px(x0: np.ndarray, x1: np.ndarray, snap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping or touching intervals (``snap``: first widened to whole pixels)."""
    if x0.size == 0:
        return x0, x1
    a = np.floor(x0) if snap else np.asarray(x0, dtype=np.float64)
    b = np.maximum(np.ceil(x1), a + 1) if snap else np.asarray(x1, dtype=np.float64)
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    run = np.maximum.accumulate(b)
    new = np.r_[True, a[1:] > run[:-1]]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, a.size - 1]
    return a[first], run[last]


# ---------------------------------------------------------------------------
# Chart frame (axes, grid, legend)
# ---------------------------------------------------------------------------

W = 960
ML, MR, MT, MB = 64, 64, 10, 38


def _axis_x(sx: _Scale, lo: float, hi: float, y: float, top: float, label: str, kind: str) -> list[str]:
    out = [f'<g class="axis x"><line x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}"/>']
    if kind == "log":  # byte sizes: powers of two, at most ~8 ticks
        e0 = math.ceil(math.log2(max(lo, 1e-300)))
        e1 = math.floor(math.log2(max(hi, 1e-300)))
        step = max(1, math.ceil((e1 - e0 + 1) / 8))
        step += step % 2 if step > 1 else 0
        ticks = [2.0**e for e in range(e0 + (-e0) % step, e1 + 1, step)] or [lo, hi]
    else:
        ticks = [t for t in nice_ticks(lo, hi) if lo <= t <= hi]
    for t in ticks:
        px = float(sx(t))
        if kind == "time":
            txt = fmt_time_ns(t, hi - lo)
        elif kind == "log":
            txt = fmt_bytes(t)
        else:
            txt = fmt_num(t)
        out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{y:.1f}" y2="{y + 4:.1f}"/>')
        out.append(f'<text x="{px:.1f}" y="{y + 15:.1f}" text-anchor="middle">{_esc(txt)}</text>')
        out.append(f'<line class="gridline" x1="{px:.1f}" x2="{px:.1f}" y1="{top:.1f}" y2="{y:.1f}"/>')
    out.append(
        f'<text x="{(ML + W - MR) / 2:.1f}" y="{y + 32:.1f}" text-anchor="middle">{_esc(label)}</text></g>'
    )
    return out


def _axis_y(sy: _Scale, lo: float, hi: float, x: float, label: str, right: bool, grid: bool) -> list[str]:
    out = [f'<g class="axis y"><line x1="{x:.1f}" x2="{x:.1f}" y1="{sy.p1:.1f}" y2="{sy.p0:.1f}"/>']
    for t in nice_ticks(lo, hi, 5):
        if not lo <= t <= hi:
            continue
        py = float(sy(t))
        dx = 4 if right else -4
        anchor = "start" if right else "end"
        out.append(f'<line x1="{x:.1f}" x2="{x + dx:.1f}" y1="{py:.1f}" y2="{py:.1f}"/>')
        out.append(
            f'<text x="{x + 2 * dx:.1f}" y="{py + 4:.1f}" text-anchor="{anchor}">{_esc(fmt_num(t))}</text>'
        )
        if grid:
            out.append(f'<line class="gridline" x1="{ML}" x2="{W - MR}" y1="{py:.1f}" y2="{py:.1f}"/>')
    lx = x + (46 if right else -46)
    my = (sy.p0 + sy.p1) / 2
    out.append(
        f'<text x="{lx:.1f}" y="{my:.1f}" text-anchor="middle" transform="rotate(-90 {lx:.1f} {my:.1f})">'
        f"{_esc(label)}</text></g>"
    )
    return out


def _legend(items: list[tuple[str, str]]) -> str:
    if not items:
        return ""
    spans = "".join(
        f'<span><span class="sw" style="background:{c}"></span>{_esc(n)}</span>' for n, c in items
    )
    return f'<div class="legend">{spans}</div>'


def _figure(kind: str, title: str, svg: str, legend: str = "", note: str = "") -> str:
    n = f'<p class="note">{_esc(note)}</p>' if note else ""
    return (
        f'<figure class="chart" data-chart="{kind}"><figcaption>{_esc(title)}</figcaption>'
        f"{svg}{legend}{n}</figure>"
    )


def empty(title: str, reason: str) -> str:
    """What a chart shows when there is nothing to draw: the reason, in words."""
    return f'<figure class="chart empty"><figcaption>{_esc(title)}</figcaption><p class="empty">{_esc(reason)}</p></figure>'


def _range(arrs: list[np.ndarray], pad: float = 0.0, zero: bool = False) -> tuple[float, float]:
    vals = [a[np.isfinite(a)] for a in arrs if a.size]
    vals = [v for v in vals if v.size]
    if not vals:
        return 0.0, 1.0
    lo = min(float(v.min()) for v in vals)
    hi = max(float(v.max()) for v in vals)
    if zero:
        lo = min(lo, 0.0)
    if hi == lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    d = (hi - lo) * pad
    return lo - (0 if zero and lo == 0 else d), hi + d


def _path(px: np.ndarray, py: np.ndarray) -> str:
    if px.size == 0:
        return ""
    pts = " L".join(f"{a:.1f},{b:.1f}" for a, b in zip(px.tolist(), py.tolist(), strict=True))
    return "M" + pts


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
) -> str:
    """Lines on a left (and optional right) axis over shaded spans."""
    xs = [np.asarray(s.x, dtype=np.float64) for s in series]
    ys = [np.asarray(s.y, dtype=np.float64) for s in series]
    if not any(np.isfinite(y).any() for y in ys if y.size):
        return empty(title, "no samples to draw")
    x0, x1 = x_range if x_range else _range(xs)
    top, bottom = MT, height - MB
    sx = _Scale(x0, x1, ML, W - MR)
    left = [y for s, y in zip(series, ys, strict=True) if s.axis != "right"]
    right = [y for s, y in zip(series, ys, strict=True) if s.axis == "right"]
    yl = _range(left, pad=0.05)
    sy = _Scale(yl[0], yl[1], bottom, top)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    parts += _axis_x(sx, x0, x1, bottom, top, x_label, x_kind)
    parts += _axis_y(sy, yl[0], yl[1], ML, y_label, False, True)
    sr = None
    if right:
        yr = _range(right, pad=0.05)
        sr = _Scale(yr[0], yr[1], bottom, top)
        parts += _axis_y(sr, yr[0], yr[1], W - MR, y2_label or "", True, False)
    parts.append('<g class="plot">')
    for sp in spans:
        a, b = float(sx(max(sp.start, x0))), float(sx(min(sp.end, x1)))
        if b > a:
            parts.append(
                f'<rect class="span" x="{a:.1f}" y="{top}" width="{max(b - a, 1):.1f}" height="{bottom - top}" '
                f'fill="#d62728" fill-opacity="0.15"><title>{_esc(sp.label)}</title></rect>'
            )
    legend = []
    for i, (s, x, y) in enumerate(zip(series, xs, ys, strict=True)):
        x, y = _finite(x, y)
        if x.size == 0:
            continue
        color = s.color or PALETTE[i % len(PALETTE)]
        scale = sr if (s.axis == "right" and sr is not None) else sy
        order = np.argsort(x, kind="stable")
        px, py = _reduce_line(sx(x[order]), scale(y[order]), W)
        parts.append(
            f'<path class="series" d="{_path(px, py)}" fill="none" stroke="{color}" stroke-width="1.5">'
            f"<title>{_esc(s.name)}</title></path>"
        )
        legend.append((s.name + (" (right axis)" if s.axis == "right" and sr is not None else ""), color))
    if spans:
        legend.append((span_label or "shaded", "rgba(214,39,40,0.3)"))
    parts.append("</g></svg>")
    return _figure("line", title, "".join(parts), _legend(legend), note)


def lanes_chart(
    lanes: Sequence[Lane],
    *,
    title: str,
    x_range: tuple[float, float],
    overlay: Sequence[Series] = (),
    overlay_label: str = "",
    x_label: str = "time",
    note: str = "",
) -> str:
    """Stacked lanes of intervals (one row per state) with series drawn over them on a right axis."""
    if not lanes:
        return empty(title, "no timed activity to draw")
    row_h, gap = (18, 12) if len(lanes) <= 4 else (12, 8)
    n_rows = sum(max(len(lane.rows), 1) for lane in lanes)
    height = MT + n_rows * row_h + len(lanes) * gap + MB + 4
    top, bottom = MT, height - MB
    x0, x1 = x_range
    sx = _Scale(x0, x1, ML + 40, W - MR)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    parts += _axis_x(sx, x0, x1, bottom, top, x_label, "time")
    parts.append('<g class="plot">')
    y = top + gap / 2
    states_seen: list[str] = []
    for lane in lanes:
        parts.append(
            f'<text x="{ML - 20}" y="{y + len(lane.rows) * row_h / 2 + 4:.1f}" text-anchor="end" '
            f'font-weight="600">{_esc(lane.name)}</text>'
        )
        for row in lane.rows:
            color = STATE_COLORS.get(row.state, "#999")
            if row.state not in states_seen:
                states_seen.append(row.state)
            parts.append(
                f'<text x="{ML + 36}" y="{y + row_h - 3:.1f}" text-anchor="end" font-size="9">{_esc(_ABBR.get(row.state, row.state[:5]))}</text>'
            )
            px0 = ML + 40
            cov = _coverage(
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
                    f'<path class="lane" data-row="{_esc(lane.name)}|{_esc(row.state)}" d="{d}" fill="{color}" '
                    f'fill-opacity="{0.15 + 0.85 * lv:.2f}"><title>{_esc(lane.name)}: {_esc(row.state)} '
                    f"({lv * 100 - 10:.0f}-{lv * 100:.0f} % of each pixel's time)</title></path>"
                )
            y += row_h
        y += gap
    legend = [(s, STATE_COLORS.get(s, "#999")) for s in states_seen]
    if overlay:
        ys = [np.asarray(s.y, dtype=np.float64) for s in overlay]
        yr = _range(ys, pad=0.05)
        sr = _Scale(yr[0], yr[1], bottom, top)
        parts.append("</g>")
        parts += _axis_y(sr, yr[0], yr[1], W - MR, overlay_label, True, False)
        parts.append('<g class="plot overlay">')
        for i, s in enumerate(overlay):
            x, yv = _finite(np.asarray(s.x, dtype=np.float64), np.asarray(s.y, dtype=np.float64))
            keep = (x >= x0) & (x <= x1)
            x, yv = x[keep], yv[keep]
            if x.size == 0:
                continue
            color = s.color or ("#d62728", "#9467bd", "#8c564b", "#e377c2")[i % 4]
            order = np.argsort(x, kind="stable")
            px, py = _reduce_line(sx(x[order]), sr(yv[order]), W)
            parts.append(
                f'<path class="series" d="{_path(px, py)}" fill="none" stroke="{color}" stroke-width="1.6">'
                f"<title>{_esc(s.name)}</title></path>"
            )
            legend.append((s.name, color))
    parts.append("</g></svg>")
    return _figure("lanes", title, "".join(parts), _legend(legend), note)


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
    sx = _Scale(lo, hi * 1.05, label_w, W - MR)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    ax = _axis_x(sx, lo, hi * 1.05, bottom, top, x_label, "num")
    parts += [p.replace(f'x1="{ML}"', f'x1="{label_w}"') for p in ax]
    parts.append('<g class="plot">')
    for i, cat in enumerate(categories):
        gy = top + i * group_h + 3
        short = cat if len(cat) <= 38 else cat[:36] + "…"
        parts.append(
            f'<text x="{label_w - 6}" y="{gy + group_h / 2 + 1:.1f}" text-anchor="end"><title>{_esc(cat)}</title>{_esc(short)}</text>'
        )
        for j, nm in enumerate(names):
            v = arrs[nm][i]
            if not np.isfinite(v):
                continue
            a, b = float(sx(min(0.0, v))), float(sx(max(0.0, v)))
            color = (colors or {}).get(nm) or PALETTE[j % len(PALETTE)]
            parts.append(
                f'<rect class="bar" x="{a:.1f}" y="{gy + j * bar_h:.1f}" width="{max(b - a, 1):.1f}" '
                f'height="{bar_h - 1}" fill="{color}"><title>{_esc(cat)} · {_esc(nm)}: {_esc(fmt_num(round(v, 3)))}</title></rect>'
            )
    parts.append("</g></svg>")
    legend = (
        _legend([(n, (colors or {}).get(n) or PALETTE[j % len(PALETTE)]) for j, n in enumerate(names)])
        if len(names) > 1
        else ""
    )
    return _figure("bar", title, "".join(parts), legend, note)


def scatter_chart(
    groups: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = True,
    hlines: Sequence[HLine] = (),
    height: int = 300,
    note: str = "",
) -> str:
    """Points per group (x log-scaled by default, labelled as byte sizes) with reference lines."""
    xs = [np.asarray(g.x, dtype=np.float64) for g in groups]
    ys = [np.asarray(g.y, dtype=np.float64) for g in groups]
    pts = [_finite(x, y) for x, y in zip(xs, ys, strict=True)]
    if log_x:
        pts = [(x[x > 0], y[x > 0]) for x, y in pts]
    if not any(x.size for x, _ in pts):
        return empty(title, "no points to draw")
    allx = np.concatenate([x for x, _ in pts])
    x0, x1 = float(allx.min()), float(allx.max())
    if log_x:
        x0, x1 = x0 / 2, x1 * 2
    ylo, yhi = _range(
        [y for _, y in pts] + [np.asarray([h.y for h in hlines], dtype=np.float64)], pad=0.08, zero=True
    )
    top, bottom = MT, height - MB
    sx = _Scale(x0, x1, ML, W - MR, log=log_x)
    sy = _Scale(ylo, yhi, bottom, top)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}">'
    ]
    parts += _axis_x(sx, x0, x1, bottom, top, x_label, "log" if log_x else "num")
    parts += _axis_y(sy, ylo, yhi, ML, y_label, False, True)
    parts.append('<g class="plot">')
    legend = []
    for h in hlines:
        py = float(sy(h.y))
        parts.append(
            f'<line class="hline" x1="{ML}" x2="{W - MR}" y1="{py:.1f}" y2="{py:.1f}" stroke="{h.color}" '
            f'stroke-width="1.5" stroke-dasharray="6 4"><title>{_esc(h.label)}</title></line>'
            f'<text x="{W - MR - 4}" y="{py - 4:.1f}" text-anchor="end" fill="{h.color}">{_esc(h.label)}</text>'
        )
    for i, (g, (x, y)) in enumerate(zip(groups, pts, strict=True)):
        if x.size == 0:
            continue
        color = g.color or PALETTE[i % len(PALETTE)]
        px, py = sx(x), sy(y)
        # points that fall on the same pixel are drawn once
        key = np.unique(
            np.round(px).astype(np.int64) * 100_000 + np.round(py).astype(np.int64), return_index=True
        )[1]
        circles = "".join(
            f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3"/>'
            for a, b in zip(px[key].tolist(), py[key].tolist(), strict=True)
        )
        parts.append(
            f'<g class="points" fill="{color}" fill-opacity="0.75"><title>{_esc(g.name)}</title>{circles}</g>'
        )
        legend.append((f"{g.name} ({x.size})", color))
    parts.append("</g></svg>")
    return _figure("scatter", title, "".join(parts), _legend(legend), note)


class Html(str):
    """A fragment of markup to put in a :func:`table` cell as it is (not escaped)."""


def _cell(v: object) -> str:
    if isinstance(v, Html):
        return f'<td class="left">{v}</td>'
    return f"<td>{_esc(v)}</td>"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], *, scroll: bool = False) -> str:
    """A small data table (values are shown as given; :class:`Html` values as markup).
    ``scroll``: wrapped in a box that scrolls sideways when the table is wider than the page."""
    th = "".join(f"<th>{_esc(h)}</th>" for h in header)
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
            f"<title>{_esc(lab)}</title></rect>"
        )
        x += w
    out.append("</svg>")
    return Html("".join(out))


def legend(items: Sequence[tuple[str, str]]) -> str:
    """Colour swatches with their names, e.g. for :func:`stack_bar`."""
    return _legend(list(items)).replace('class="legend"', 'class="legend" style="margin-left:0"')


# ---------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------


@dataclass
class HtmlReport:
    title: str
    subtitle: str = ""
    sections: list[tuple[str, str, str]] = field(default_factory=list)  # (id, title, html)

    def add(self, title: str, *parts: str, note: str = "", sid: str | None = None) -> None:
        """A section; ``sid`` (default: from the title, e.g. ``critical-path``) is its anchor."""
        base = sid or "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-") or "section"
        base = "-".join(w for w in base.split("-") if w)
        taken = {x for x, _, _ in self.sections}
        sid, k = base, 2
        while sid in taken:
            sid, k = f"{base}-{k}", k + 1
        body = (f'<p class="note">{_esc(note)}</p>' if note else "") + "".join(parts)
        self.sections.append((sid, title, body))

    def render(self) -> str:
        secs = "".join(
            f'<section id="{_esc(sid)}"><h2>{_esc(t)}</h2>{body}</section>' for sid, t, body in self.sections
        )
        sub = f"<p>{_esc(self.subtitle)}</p>" if self.subtitle else ""
        toc = ""
        if len(self.sections) > 1:  # the page's section list, linking to each section
            links = "".join(f'<a href="#{_esc(sid)}">{_esc(t)}</a>' for sid, t, _ in self.sections)
            toc = f'<nav class="toc">{links}</nav>'
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_esc(self.title)}</title><style>{_CSS}</style></head>"
            f"<body><header><h1>{_esc(self.title)}</h1>{sub}</header><main>{toc}{secs}</main></body></html>\n"
        )
