"""A heatmap primitive for the HTML report: rows × columns of cells coloured by value on a
sequential scale, each cell with a ``<title>`` tooltip, and a colour-scale legend.

Many rows (thousands of ranks) are drawn as bins of consecutive rows so the SVG stays small:
with more than ``max_rows`` rows, each drawn row is a bin of ``ceil(n / max_rows)`` consecutive
rows showing the largest value of the bin (the worst row), and its tooltip names the bin's rows
and which of them holds that value. Columns are binned the same way past ``max_cols``. This
reduction is a drawing one, like the per-pixel reductions of :mod:`charllm_trace.render.svg`:
every value comes from the caller."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from charllm_trace.render.svg import MB, MR, MT, W, empty, esc, figure

#: the colour scale, light (small) to dark (large): five stops interpolated linearly
STOPS = ("#f7fbff", "#c6dbef", "#6baed6", "#2171b5", "#08306b")
NO_VALUE = "#e8e8e8"


def colour(t: float) -> str:
    """The scale's colour at ``t`` in [0, 1]."""
    t = min(max(t, 0.0), 1.0) * (len(STOPS) - 1)
    i = min(int(t), len(STOPS) - 2)
    f = t - i
    a = [int(STOPS[i][k : k + 2], 16) for k in (1, 3, 5)]
    b = [int(STOPS[i + 1][k : k + 2], 16) for k in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))


def _bins(n: int, most: int) -> list[tuple[int, int]]:
    """[start, end) index ranges of consecutive bins: n of size 1, or ceil(n / most) each."""
    size = max(1, math.ceil(n / most))
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def _label(labels: Sequence[object], lo: int, hi: int) -> str:
    return str(labels[lo]) if hi - lo == 1 else f"{labels[lo]}-{labels[hi - 1]}"


def heatmap(
    values: np.ndarray,
    row_labels: Sequence[object],
    col_labels: Sequence[object],
    *,
    title: str,
    row_name: str,
    col_name: str,
    value_name: str,
    fmt: str = "{:,.3f}",
    scale: float = 1.0,
    unit: str = "",
    max_rows: int = 64,
    max_cols: int = 120,
    note: str = "",
) -> str:
    """``values[i, j]`` (NaN: no value) of row ``row_labels[i]`` and column ``col_labels[j]``,
    shown as ``fmt.format(value / scale)`` + ``unit``. Rows/columns past ``max_rows``/``max_cols``
    are binned (the module's docstring)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or not np.isfinite(v).any():
        return empty(title, "nothing to draw")
    rb, cb = _bins(v.shape[0], max_rows), _bins(v.shape[1], max_cols)
    binned = len(rb) < v.shape[0] or len(cb) < v.shape[1]
    lo, hi = float(np.nanmin(v)), float(np.nanmax(v))
    span = hi - lo if hi > lo else 1.0
    label_w, legend_h = 96, 34
    cell_w = (W - label_w - MR) / len(cb)
    cell_h = max(4.0, min(18.0, 640.0 / len(rb)))
    top = MT + 14
    height = top + cell_h * len(rb) + MB + legend_h
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height:.0f}" viewBox="0 0 {W} {height:.0f}">'
    ]

    def show(x: float) -> str:
        return fmt.format(x / scale) + unit

    out.append(
        f'<text x="{label_w - 6}" y="{MT + 8}" text-anchor="end">{esc(row_name)} \\ {esc(col_name)}</text>'
    )
    every_c = max(1, math.ceil(len(cb) / 16))
    for j, (c0, c1) in enumerate(cb):
        if j % every_c == 0:
            x = label_w + (j + 0.5) * cell_w
            out.append(
                f'<text x="{x:.1f}" y="{MT + 8}" text-anchor="middle">{esc(_label(col_labels, c0, c1))}</text>'
            )
    every_r = max(1, math.ceil(len(rb) * 12 / (cell_h * len(rb))))
    out.append('<g class="plot">')
    for i, (r0, r1) in enumerate(rb):
        y = top + i * cell_h
        if i % every_r == 0:
            out.append(
                f'<text x="{label_w - 6}" y="{y + cell_h / 2 + 4:.1f}" text-anchor="end">'
                f"{esc(_label(row_labels, r0, r1))}</text>"
            )
        for j, (c0, c1) in enumerate(cb):
            block = v[r0:r1, c0:c1]
            x = label_w + j * cell_w
            if not np.isfinite(block).any():
                fill, tip = (
                    NO_VALUE,
                    f"{row_name} {_label(row_labels, r0, r1)} · {col_name} {_label(col_labels, c0, c1)}: no value",
                )
            else:
                k = int(np.nanargmax(block))
                wr, wc = r0 + k // block.shape[1], c0 + k % block.shape[1]
                val = float(block.flat[k])
                fill = colour((val - lo) / span)
                if block.size == 1:
                    tip = f"{row_name} {row_labels[wr]} · {col_name} {col_labels[wc]} · {value_name} {show(val)}"
                else:
                    tip = (
                        f"{row_name}s {_label(row_labels, r0, r1)} · {col_name} {_label(col_labels, c0, c1)} · "
                        f"largest {value_name} {show(val)} ({row_name} {row_labels[wr]}, {col_name} {col_labels[wc]})"
                    )
            out.append(
                f'<rect class="cell" x="{x:.1f}" y="{y:.1f}" width="{max(cell_w - 0.5, 0.5):.1f}" '
                f'height="{max(cell_h - 0.5, 0.5):.1f}" fill="{fill}"><title>{esc(tip)}</title></rect>'
            )
    out.append("</g>")
    # the colour scale: a gradient bar from the smallest to the largest value
    ly = top + cell_h * len(rb) + 16
    lx0, lx1 = label_w, label_w + 300
    gid = f"hm{abs(hash((title, lo, hi))) % 10**8}"
    stops = "".join(
        f'<stop offset="{k / (len(STOPS) - 1):.2f}" stop-color="{c}"/>' for k, c in enumerate(STOPS)
    )
    out.append(
        f'<g class="scale"><defs><linearGradient id="{gid}">{stops}</linearGradient></defs>'
        f'<rect x="{lx0}" y="{ly:.1f}" width="{lx1 - lx0}" height="10" fill="url(#{gid})"/>'
        f'<text x="{lx0}" y="{ly + 24:.1f}" text-anchor="start">{esc(show(lo))}</text>'
        f'<text x="{lx1}" y="{ly + 24:.1f}" text-anchor="end">{esc(show(hi))}</text>'
        f'<text x="{lx1 + 10}" y="{ly + 9:.1f}" text-anchor="start">{esc(value_name)}</text></g>'
    )
    out.append("</svg>")
    if binned:
        extra = (
            f"{v.shape[0]:,} {row_name}s in {len(rb)} rows of {rb[0][1] - rb[0][0]:,} consecutive {row_name}s"
            if len(rb) < v.shape[0]
            else ""
        )
        if len(cb) < v.shape[1]:
            extra += ("; " if extra else "") + f"{v.shape[1]:,} {col_name}s in {len(cb)} columns"
        note = (note + " " if note else "") + f"Binned: {extra}; each cell shows its bin's largest value."
    return figure("heatmap", title, "".join(out), "", note)
