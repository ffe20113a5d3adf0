"""SVG drawing helpers of the HTML report's charts: scales and ticks, number formats, axes,
legends and the figure frame, and the reductions that keep a chart small on huge traces
(a series reduced to the first, min, max and last point per pixel column, intervals merged
per pixel and turned into the covered share of each column). No chart is drawn here: the
charts are in :mod:`charllm_trace.render.charts`, the page in :mod:`charllm_trace.render.html`.
"""

from __future__ import annotations

import html
import math

import numpy as np

# ---------------------------------------------------------------------------
# Scales and ticks
# ---------------------------------------------------------------------------


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


class Scale:
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


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def finite(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(x) & np.isfinite(y)
    return x[ok], y[ok]


def reduce_line(px: np.ndarray, py: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
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


def coverage(starts: np.ndarray, ends: np.ndarray, x0: float, x1: float, n: int) -> np.ndarray:
    """Share (0..1) of each of ``n`` equal pixel columns over [x0, x1) covered by the intervals."""
    ok = ends > starts
    s, e = merge_px(starts[ok], ends[ok], snap=False)
    edges = np.linspace(x0, x1, n + 1)
    cum = np.r_[0.0, np.cumsum(e - s)]

    def covered_before(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right")
        over = np.where(k > 0, np.maximum(e[np.maximum(k - 1, 0)] - t, 0.0), 0.0) if s.size else 0.0
        return cum[k] - over

    width = (x1 - x0) / n if x1 > x0 else 1.0
    return np.clip(np.diff(covered_before(edges)) / width, 0.0, 1.0)


def merge_px(x0: np.ndarray, x1: np.ndarray, snap: bool = True) -> tuple[np.ndarray, np.ndarray]:
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


def axis_x(sx: Scale, lo: float, hi: float, y: float, top: float, label: str, kind: str) -> list[str]:
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
        out.append(f'<text x="{px:.1f}" y="{y + 15:.1f}" text-anchor="middle">{esc(txt)}</text>')
        out.append(f'<line class="gridline" x1="{px:.1f}" x2="{px:.1f}" y1="{top:.1f}" y2="{y:.1f}"/>')
    out.append(
        f'<text x="{(ML + W - MR) / 2:.1f}" y="{y + 32:.1f}" text-anchor="middle">{esc(label)}</text></g>'
    )
    return out


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks of a log axis: the decades in [lo, hi], with 2 and 5 between them when the axis
    spans fewer than three decades."""
    e0, e1 = math.floor(math.log10(max(lo, 1e-300))), math.ceil(math.log10(max(hi, 1e-300)))
    mult = (1.0, 2.0, 5.0) if e1 - e0 < 3 else (1.0,)
    return [m * 10.0**e for e in range(e0, e1 + 1) for m in mult if lo <= m * 10.0**e <= hi]


def axis_y(
    sy: Scale, lo: float, hi: float, x: float, label: str, right: bool, grid: bool, log: bool = False
) -> list[str]:
    out = [f'<g class="axis y"><line x1="{x:.1f}" x2="{x:.1f}" y1="{sy.p1:.1f}" y2="{sy.p0:.1f}"/>']
    for t in log_ticks(lo, hi) if log else nice_ticks(lo, hi, 5):
        if not lo <= t <= hi:
            continue
        py = float(sy(t))
        dx = 4 if right else -4
        anchor = "start" if right else "end"
        out.append(f'<line x1="{x:.1f}" x2="{x + dx:.1f}" y1="{py:.1f}" y2="{py:.1f}"/>')
        out.append(
            f'<text x="{x + 2 * dx:.1f}" y="{py + 4:.1f}" text-anchor="{anchor}">{esc(fmt_num(t))}</text>'
        )
        if grid:
            out.append(f'<line class="gridline" x1="{ML}" x2="{W - MR}" y1="{py:.1f}" y2="{py:.1f}"/>')
    lx = x + (46 if right else -46)
    my = (sy.p0 + sy.p1) / 2
    out.append(
        f'<text x="{lx:.1f}" y="{my:.1f}" text-anchor="middle" transform="rotate(-90 {lx:.1f} {my:.1f})">'
        f"{esc(label)}</text></g>"
    )
    return out


def swatches(items: list[tuple[str, str]]) -> str:
    if not items:
        return ""
    spans = "".join(f'<span><span class="sw" style="background:{c}"></span>{esc(n)}</span>' for n, c in items)
    return f'<div class="legend">{spans}</div>'


def figure(kind: str, title: str, svg: str, legend: str = "", note: str = "") -> str:
    n = f'<p class="note">{esc(note)}</p>' if note else ""
    return (
        f'<figure class="chart" data-chart="{kind}"><figcaption>{esc(title)}</figcaption>'
        f"{svg}{legend}{n}</figure>"
    )


def empty(title: str, reason: str) -> str:
    """What a chart shows when there is nothing to draw: the reason, in words."""
    return f'<figure class="chart empty"><figcaption>{esc(title)}</figcaption><p class="empty">{esc(reason)}</p></figure>'


def value_range(arrs: list[np.ndarray], pad: float = 0.0, zero: bool = False) -> tuple[float, float]:
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


def path_d(px: np.ndarray, py: np.ndarray) -> str:
    if px.size == 0:
        return ""
    pts = " L".join(f"{a:.1f},{b:.1f}" for a, b in zip(px.tolist(), py.tolist(), strict=True))
    return "M" + pts
