"""Energy per operator and power/thermal per step on SYNTHETIC telemetry streams with
hand-computed answers (no GPU here; the streams are labelled synthetic)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from charllm_trace.analysis.energy import energy, interval_energy
from charllm_trace.analysis.power import power
from tests.helpers.analysis_helpers import T0, cpu, kernel, make_trace
from tests.helpers.fuzz_budget import examples

S = 1_000_000_000  # one second in ns


def _tel(times, powers, **cols):
    d = {"time_ns": [T0 + t for t in times], "device": [0] * len(times), "power_w": powers}
    d.update(cols)
    return d


def _energy_trace(counter=None):
    rows = [
        cpu(1, "aten::mm", 0, 10, correlation=None),
        cpu(2, "cudaLaunchKernel", 1, 2, kind="runtime", parent=1, correlation=101),
        kernel(10, "gemm_A", 0, S // 2, stream=7, correlation=101),
        kernel(11, "gemm_B", S // 4, S // 2, stream=8, launch_id=1),
        kernel(12, "ncclDevKernel_AllReduce", 3 * S // 2, S, stream=20, coll_type="all_reduce"),
    ]
    tel = _tel([0, S, 2 * S], [100.0, 200.0, 100.0])  # synthetic
    if counter is not None:
        tel["energy_j"] = counter
    return make_trace(rows, telemetry=tel)


def test_energy_known_answer_trapezoid():
    r = energy(_energy_trace())
    k = {row["key"]: row["energy_j"] for row in r.group("kernel").iter_rows(named=True)}
    # interval 0 (150 J): busy 0.75 s -> 112.5 J split A/B equally; idle 37.5
    # interval 1 (150 J): busy [1.5, 2) -> 75 J to the all-reduce; idle 75
    assert k["gemm_A"] == pytest.approx(56.25)
    assert k["gemm_B"] == pytest.approx(56.25)
    assert k["ncclDevKernel_AllReduce"] == pytest.approx(75.0)
    assert k["(idle)"] == pytest.approx(112.5)
    t = r.totals.row(0, named=True)
    assert t["integral_j"] == pytest.approx(300.0) and t["correction"] == 1.0 and t["counter_j"] is None
    # per launching op: gemm_A via correlation -> cudaLaunchKernel -> its parent aten::mm; gemm_B via launch_id
    ops = {row["key"]: row["energy_j"] for row in r.group("op").iter_rows(named=True)}
    assert ops["aten::mm"] == pytest.approx(112.5)
    ph = {row["key"]: row["energy_j"] for row in r.group("phase").iter_rows(named=True)}
    assert ph["communication"] == pytest.approx(75.0) and ph["forward"] == pytest.approx(112.5)
    ct = {row["key"]: row["energy_j"] for row in r.group("coll_type").iter_rows(named=True)}
    assert ct == {"all_reduce": pytest.approx(75.0)}


def test_energy_step_method_and_counter_correction():
    r = energy(_energy_trace(), method="step")
    k = {row["key"]: row["energy_j"] for row in r.group("kernel").iter_rows(named=True)}
    assert k["gemm_A"] == pytest.approx(37.5) and k["ncclDevKernel_AllReduce"] == pytest.approx(100.0)
    c = energy(_energy_trace(counter=[1000.0, 1150.0, 1330.0]))
    t = c.totals.row(0, named=True)
    assert t["counter_j"] == pytest.approx(330.0) and t["correction"] == pytest.approx(1.1)
    assert t["total_j"] == pytest.approx(330.0)
    k = {row["key"]: row["energy_j"] for row in c.group("kernel").iter_rows(named=True)}
    assert k["gemm_A"] == pytest.approx(56.25 * 1.1)
    assert any("correction" in n for n in c.notes)


def test_no_telemetry_says_so():
    tr = make_trace([kernel(1, "gemm", 0, 10)])
    assert energy(tr).notes == ["no power telemetry in this trace"]
    assert power(tr).notes == ["no power telemetry in this trace"]


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=12),  # sample gaps (ms)
    st.data(),
    st.lists(st.tuples(st.integers(-100, 700), st.integers(0, 200), st.integers(0, 2)), max_size=30),
    st.sampled_from(["trapezoid", "step"]),
)
def test_energy_is_conserved(gaps, data, ks, method):
    """Σ operators + idle == ∫ P dt over the window, whatever the kernels (synthetic)."""
    ms = 1_000_000
    times = np.concatenate([[0], np.cumsum(gaps)]) * ms
    pw = data.draw(st.lists(st.floats(0, 700), min_size=times.size, max_size=times.size))
    rows = [kernel(i + 1, f"k{i % 4}", s * ms, d * ms, stream=7 + st_) for i, (s, d, st_) in enumerate(ks)]
    rows.append(cpu(1000, "x", 0, 1))
    tr = make_trace(rows, telemetry=_tel(times.tolist(), pw))
    r = energy(tr, method=method)
    integral = float(interval_energy(times, np.array(pw), method).sum())
    for g in ("kernel", "phase", "op"):
        assert r.group(g)["energy_j"].sum() == pytest.approx(integral, rel=1e-9, abs=1e-9)
    t = r.totals.row(0, named=True)
    assert t["operators_j"] + t["idle_j"] == pytest.approx(integral, rel=1e-9, abs=1e-9)


# ---------------------------------------------------------------- power / thermal


def _power_trace():
    d = S // 10
    times = [i * d for i in range(11)]
    p = [100, 100, 300, 100, 100, 100, 150, 100, 100, 100, 100]
    thr = [0] * 11
    thr[2] = 0x4  # sw_power_cap
    thr[7] = 0x20 | 0x1  # sw_thermal_slowdown + gpu_idle
    clk = [1980.0] * 11
    clk[2] = 1500.0
    tel = _tel(
        times,
        [float(x) for x in p],
        power_limit_w=[250.0] * 11,
        temp_c=[30.0 + i for i in range(11)],
        sm_clock_mhz=clk,
        throttle_reasons=thr,
    )  # synthetic
    rows = [
        cpu(1, "ProfilerStep#1", 0, S // 2, kind="annotation"),
        cpu(2, "ProfilerStep#2", S // 2, S // 2, kind="annotation"),
        kernel(3, "gemm", 0, S),
    ]
    return make_trace(rows, telemetry=tel)


def test_power_per_step_known_answer():
    r = power(_power_trace())
    s = {row["step"]: row for row in r.per_step.iter_rows(named=True)}
    one, two = s[1], s[2]
    assert one["avg_w"] == pytest.approx(70.0 / 0.5)
    assert one["peak_w"] == 300 and one["min_w"] == 100 and one["swing_w"] == 200
    assert one["swing_rate_w_per_s"] == pytest.approx(2000.0)
    assert two["peak_w"] == 150 and two["swing_rate_w_per_s"] == pytest.approx(500.0)
    assert one["above_limit_ns"] == S // 10 and two["above_limit_ns"] == 0
    assert one["temp_start_c"] == pytest.approx(30) and one["temp_rise_c"] == pytest.approx(5)
    assert one["sm_clock_ratio"] == pytest.approx((1980 * 5 + 1500) / 6 / 1980)
    assert one["throttled_ns"] == S // 10 and two["throttled_ns"] == S // 10
    th = {(row["step"], row["reason"]): row["time_ns"] for row in r.throttle.iter_rows(named=True)}
    assert th[(1, "sw_power_cap")] == S // 10
    assert th[(2, "sw_thermal_slowdown")] == S // 10 and th[(2, "gpu_idle")] == S // 10
    assert s[None]["peak_w"] == 300 and s[None]["n_samples"] == 11


def test_power_flags_outlier_step():
    d = S // 10
    n = 8 * 5 + 1
    p = [200.0] * n
    p[3 * 5 + 2] = 400.0  # a spike in step 3 (synthetic)
    rows = [cpu(i + 1, f"ProfilerStep#{i}", i * 5 * d, 5 * d, kind="annotation") for i in range(8)]
    rows.append(kernel(100, "gemm", 0, 10))
    r = power(make_trace(rows, telemetry=_tel([i * d for i in range(n)], p)))
    flagged = r.per_step.filter(pl.col("outlier"))["step"].to_list()
    assert flagged == [3]


def test_sensor_period_detected_from_repeated_readings():
    """Sampled every 10 ms, the (synthetic) sensor refreshes every 50 ms: the period used for
    the short-operator uncertainty is 50 ms, not the 10 ms sampling gap."""
    ms = 1_000_000
    times = [i * 10 * ms for i in range(41)]
    pw = [100.0 + 10 * (i // 5) for i in range(41)]  # a new value every 5th sample
    tr = make_trace([kernel(1, "gemm", 0, 30 * ms)], telemetry=_tel(times, pw))
    t = energy(tr).totals.row(0, named=True)
    assert t["sensor_period_ns"] == 50 * ms
    assert t["short_kernel_pct"] == 100.0  # the 30 ms kernel is shorter than 50 ms


def test_power_step_outside_telemetry_window_is_empty():
    d = S // 10
    rows = [
        cpu(1, "ProfilerStep#1", 0, 5 * d, kind="annotation"),
        cpu(2, "ProfilerStep#2", 20 * d, 5 * d, kind="annotation"),  # after the last sample
        kernel(3, "gemm", 0, 10),
    ]
    r = power(make_trace(rows, telemetry=_tel([i * d for i in range(11)], [100.0] * 11)))
    s = {row["step"]: row for row in r.per_step.iter_rows(named=True)}
    assert s[1]["avg_w"] == pytest.approx(100.0) and s[1]["n_samples"] == 6
    assert s[2]["n_samples"] == 0 and s[2]["peak_w"] is None and s[2]["avg_w"] is None
    assert any("outside the telemetry window" in n for n in r.notes)
