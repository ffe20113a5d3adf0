"""--energy-method counter: intervals from the energy counter's own increments, on SYNTHETIC
telemetry with hand-computed answers; the real H200 run is in tests/e2e/test_fixture_h200.py."""

from __future__ import annotations

import pytest

from charllm_trace.analysis.energy import energy
from charllm_trace.analysis.energy_counter import counter_intervals, update_period_ns
from charllm_trace.analysis.energy_methods import ENERGY_METHODS
from tests.helpers.analysis_helpers import T0, cpu, kernel, make_trace

S = 1_000_000_000
H = S // 2


def _trace(counter: list[float | None]):  # type: ignore[no-untyped-def]
    rows = [
        cpu(1, "aten::mm", 0, 10, correlation=None),
        kernel(10, "gemm_A", S, H, stream=7, launch_id=1),  # [1.0, 1.5) s
        kernel(11, "gemm_B", 2 * S, S, stream=7, launch_id=1),  # [2.0, 3.0) s
    ]
    times = [k * H for k in range(7)]  # a sample every 0.5 s, the counter changes every 1 s
    tel = {"time_ns": [T0 + t for t in times], "device": [0] * 7, "power_w": [100.0] * 7, "energy_j": counter}
    return make_trace(rows, telemetry=tel)


COUNTER = [1000.0, 1000.0, 1100.0, 1100.0, 1300.0, 1300.0, 1450.0]


def test_counter_intervals_are_its_changes() -> None:
    tel = _trace(COUNTER).telemetry
    edges, e = counter_intervals(tel)  # type: ignore[misc]
    assert (edges - T0).tolist() == [S, 2 * S, 3 * S]  # the value before the first change is dropped
    assert e.tolist() == [200.0, 150.0]
    assert update_period_ns(edges) == S


def test_energy_by_counter_known_answer() -> None:
    r = energy(_trace(COUNTER), method="counter")
    k = {row["key"]: row["energy_j"] for row in r.group("kernel").iter_rows(named=True)}
    # [1, 2) s holds 200 J, gemm_A runs half of it; [2, 3) s holds 150 J, all gemm_B
    assert k["gemm_A"] == pytest.approx(100.0) and k["gemm_B"] == pytest.approx(150.0)
    assert k["(idle)"] == pytest.approx(100.0)
    t = r.totals.row(0, named=True)
    assert t["total_j"] == t["counter_j"] == t["integral_j"] == pytest.approx(350.0)
    assert t["correction"] == 1.0 and t["start_ns"] - T0 == S and t["end_ns"] - T0 == 3 * S
    # the flat 100 W readings would give 200 J over the same 2 s: the note says by how much they differ
    assert any("counter's increments" in n and "-42.86 %" in n for n in r.notes), r.notes
    # the trapezoid over the same stream: 100 W flat, scaled to the counter over the whole window
    tz = energy(_trace(COUNTER), method="trapezoid").totals.row(0, named=True)
    assert tz["correction"] == pytest.approx(450.0 / 300.0)


@pytest.mark.parametrize(
    "counter, why",
    [
        ([None] * 7, "absent"),
        ([1000.0, 1000.0, 1000.0, 1000.0, 1100.0, 1100.0, 1100.0], "one change"),
        ([1000.0, 1100.0, 1200.0, 50.0, 150.0, 250.0, 350.0], "reset"),
    ],
)
def test_no_usable_counter_falls_back_to_trapezoid_with_a_note(counter: list, why: str) -> None:
    assert counter_intervals(_trace(counter).telemetry) is None, why
    r = energy(_trace(counter), method="counter")
    assert any("no usable energy counter" in n for n in r.notes)
    assert r.totals["integral_j"][0] == pytest.approx(300.0)  # 100 W over 3 s, trapezoid


def test_the_command_line_offers_every_method() -> None:
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    out = CliRunner().invoke(main, ["analyze", "--help"]).output
    assert all(m in out for m in ENERGY_METHODS)
