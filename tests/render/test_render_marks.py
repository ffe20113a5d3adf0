"""Labelled vertical marks (render/marks.py): close marks keep their lines, labels never collide."""

from __future__ import annotations

import re

from charllm_trace.render.marks import LABEL_CHAR_PX, vlines
from charllm_trace.render.svg import Scale


def _labels(parts: list[str]) -> list[tuple[float, str]]:
    return [
        (float(m[0]), m[1])
        for p in parts
        for m in re.findall(r'<text class="mark" x="([\d.]+)"[^>]*>([^<]*)<', p)
    ]


def test_marks_close_together_keep_lines_and_drop_colliding_labels() -> None:
    # the H200 report: 4 steps 0.2 s apart on a 30 s telemetry axis 830 px wide (5.5 px apart)
    sx = Scale(0.0, 30.0, 80.0, 910.0)
    marks = [(23.0 + 0.2 * k, f"step {3 + k}") for k in range(4)] + [(28.0, "step 9")]
    parts = vlines(marks, sx, 0.0, 30.0, 10.0, 200.0)
    assert sum(p.startswith("<line") for p in parts) == 5  # every mark keeps its line and tooltip
    labels = _labels(parts)
    assert [lab for _, lab in labels] == ["step 3", "step 9"]
    for (xa, la), (xb, _) in zip(labels, labels[1:], strict=False):
        assert xb >= xa + LABEL_CHAR_PX * len(la)


def test_marks_with_room_all_get_labels() -> None:
    sx = Scale(0.0, 4.0, 0.0, 800.0)
    parts = vlines([(float(k), f"step {k}") for k in range(4)], sx, 0.0, 4.0, 0.0, 100.0)
    assert [lab for _, lab in _labels(parts)] == ["step 0", "step 1", "step 2", "step 3"]
