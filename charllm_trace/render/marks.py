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


#: the width of one character of a 9-px label, a little more than the average glyph's
LABEL_CHAR_PX = 5.5


def vlines(
    marks: Sequence[tuple[float, str]], sx: Scale, x0: float, x1: float, top: float, bottom: float
) -> list[str]:
    """Vertical marker lines with their labels: a label is drawn only where it does not run into
    the previous one (marks close together, e.g. steps on a long telemetry axis, keep their lines
    and a tooltip each)."""
    inside = [(x, lab) for x, lab in marks if x0 <= x <= x1]
    out = []
    free_from = -math.inf  # the first pixel after the last label drawn
    for x, lab in inside:
        px = float(sx(x))
        out.append(
            f'<line class="mark" x1="{px:.1f}" x2="{px:.1f}" y1="{top:.1f}" y2="{bottom:.1f}" stroke="#333" '
            f'stroke-width="1" stroke-dasharray="2 3"><title>{esc(lab)}</title></line>'
        )
        if px + 2 >= free_from:
            out.append(
                f'<text class="mark" x="{px + 2:.1f}" y="{top + 9:.1f}" font-size="9">{esc(lab)}</text>'
            )
            free_from = px + 2 + LABEL_CHAR_PX * len(lab) + 4
    return out
