"""The phase lookup of host-blamed idle intervals (``analysis/cpu_wait._holding``, vectorised):
known answers on hand-made ranges, and agreement with the plain per-element rule."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from charllm_trace.analysis.cpu_wait import _holding
from tests.helpers.fuzz_budget import examples


def _reference(starts: np.ndarray, ends: np.ndarray, names: list[str], t: np.ndarray) -> list[str | None]:
    out: list[str | None] = []
    for x in t.tolist():
        held = [n for s, e, n in zip(starts.tolist(), ends.tolist(), names, strict=True) if s <= x < e]
        out.append(held[-1] if held else None)
    return out


def test_known_answers() -> None:
    starts, ends = np.array([10, 30, 50]), np.array([20, 40, 60])
    t = np.array([0, 10, 19, 20, 25, 30, 55, 60, 99])
    got = _holding(starts, ends, ["fwd", "bwd", "fwd"], t).to_list()
    assert got == [None, "fwd", "fwd", None, None, "bwd", "fwd", None, None]


def test_no_ranges_all_null() -> None:
    got = _holding(np.array([], dtype=np.int64), np.array([], dtype=np.int64), [], np.array([1, 2, 3]))
    assert got.to_list() == [None, None, None]
    assert _holding(np.array([5]), np.array([9]), ["p"], np.array([], dtype=np.int64)).to_list() == []


@settings(max_examples=examples(200), deadline=None)
@given(
    gaps=st.lists(st.tuples(st.integers(0, 50), st.integers(1, 50)), max_size=12),
    t=st.lists(st.integers(-10, 1500), max_size=40),
)
def test_matches_per_element_rule(gaps: list[tuple[int, int]], t: list[int]) -> None:
    starts, ends, at = [], [], 0
    for gap, dur in gaps:  # disjoint ranges sorted by start
        starts.append(at + gap)
        ends.append(at + gap + dur)
        at = ends[-1]
    s, e, tt = np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), np.array(t, dtype=np.int64)
    names = [f"p{k % 3}" for k in range(len(starts))]
    assert _holding(s, e, names, tt).to_list() == _reference(s, e, names, tt)
