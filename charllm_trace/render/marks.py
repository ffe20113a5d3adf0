"""Small SVG marks shared by the report's charts: scatter markers of distinct shapes (each with
its tooltip) and labelled vertical lines (e.g. step starts)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from charllm_trace.render.svg import Scale, esc

#: Marker shapes of a scatter's groups, in order (distinct shapes: no group hides another).
MARKERS = ("circle", "square", "triangle", "diamond", "cross")


def marker(shape: str, x: float, y: float, tip: str) -> str:
    t = f"<title>{esc(tip)}</title>"
    if shape == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6">{t}</rect>'
    if shape == "triangle":
        return f'<path d="M{x:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 3:.1f}L{x - 4:.1f},{y + 3:.1f}Z">{t}</path>'
    if shape == "diamond":
        return f'<path d="M{x:.1f},{y - 4:.1f}L{x + 4:.1f},{y:.1f}L{x:.1f},{y + 4:.1f}L{x - 4:.1f},{y:.1f}Z">{t}</path>'
    if shape == "cross":
        return (
            f'<path d="M{x - 3:.1f},{y - 3:.1f}L{x + 3:.1f},{y + 3:.1f}M{x - 3:.1f},{y + 3:.1f}L{x + 3:.1f},{y - 3:.1f}" '
            f'stroke-width="2" stroke="currentColor">{t}</path>'
        )
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3">{t}</circle>'


def vlines(
    marks: Sequence[tuple[float, str]], sx: Scale, x0: float, x1: float, top: float, bottom: float
) -> list[str]:
    """Vertical marker lines with their labels (every label when there is room, else some)."""
    inside = [(x, lab) for x, lab in marks if x0 <= x <= x1]
    every = max(1, math.ceil(len(inside) / 12))
    out = []
    for k, (x, lab) in enumerate(inside):
        px = float(sx(x))
        out.append(
            f'<line class="mark" x1="{px:.1f}" x2="{px:.1f}" y1="{top:.1f}" y2="{bottom:.1f}" stroke="#333" '
            f'stroke-width="1" stroke-dasharray="2 3"><title>{esc(lab)}</title></line>'
        )
        if k % every == 0:
            out.append(
                f'<text class="mark" x="{px + 2:.1f}" y="{top + 9:.1f}" font-size="9">{esc(lab)}</text>'
            )
    return out
