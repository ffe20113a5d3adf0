"""Power and thermal behaviour per step.

For each (rank, device) and each ``ProfilerStep`` window (plus a whole-telemetry row
with ``step`` null), from the telemetry samples (docs/analyses.md):

- ``avg_w``: ∫P dt / duration over the window (trapezoid, linear between samples,
  interpolated at the window edges); ``peak_w``/``min_w``: extreme samples inside;
- ``swing_w``: the largest power swing inside the step, ``peak_w − min_w``;
  ``swing_rate_w_per_s``: the steepest change between consecutive samples inside
  the step, max |ΔP| / Δt;
- ``above_limit_ns``: time with ``power_w >= power_limit_w`` (each sample held until
  the next);
- temperatures interpolated at the window edges, ``temp_rise_c = end − start``;
- ``sm_clock_ratio``: mean SM clock of the samples over the device's maximum SM clock
  (``meta.extra["max_sm_clock_mhz"]`` when the collector recorded it, else the
  highest clock seen in the trace);
- throttle time per reason (bit table :data:`THROTTLE_REASONS`, NVML's clock-event
  reasons; each sample's mask held until the next); ``throttled_ns`` counts the
  reasons in :data:`SLOWDOWN_MASK`.

A step is an outlier when its peak power or its throttled fraction exceeds the
median over steps by more than 3 scaled median absolute deviations (MAD × 1.4826)
and by at least 5 % of the median (peak) / 1 percentage point (throttling); at
least 4 steps are needed.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext, context_of
from charllm_trace.analysis.energy import cumulative_energy, device_samples, trace_devices
from charllm_trace.analysis.results import POWER_SCHEMA, THROTTLE_SCHEMA, PowerResult, frame
from charllm_trace.core import intervals as iv
from charllm_trace.core.model import Trace

#: NVML clock-event (throttle) reason bits — nvmlClocksEventReason* / nvmlClocksThrottleReason*.
THROTTLE_REASONS: dict[int, str] = {
    0x0001: "gpu_idle",
    0x0002: "applications_clocks_setting",
    0x0004: "sw_power_cap",
    0x0008: "hw_slowdown",
    0x0010: "sync_boost",
    0x0020: "sw_thermal_slowdown",
    0x0040: "hw_thermal_slowdown",
    0x0080: "hw_power_brake_slowdown",
    0x0100: "display_clock_setting",
}
#: Reasons that mean the GPU is being slowed down (power, thermal, hardware).
SLOWDOWN_MASK = 0x0004 | 0x0008 | 0x0020 | 0x0040 | 0x0080

OUTLIER_MADS = 3.0


def is_amd(trace: Trace) -> bool:
    m = (trace.meta.device_model or "").lower()
    return "amd" in m or "instinct" in m or m.startswith("mi")


def _reason_names(trace: Trace, masks: np.ndarray) -> dict[int, str]:
    """Bits present in the masks and their names (AMD's SMU throttle word has no
    portable bit table: bits are reported by number)."""
    present = int(np.bitwise_or.reduce(masks)) if masks.size else 0
    out: dict[int, str] = {}
    bit = 1
    while bit <= present:
        if present & bit:
            out[bit] = (
                f"amd_bit_{bit.bit_length() - 1}"
                if is_amd(trace)
                else THROTTLE_REASONS.get(bit, f"bit_{bit.bit_length() - 1}")
            )
        bit <<= 1
    return out


def _held_measure(t: np.ndarray, flag: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Time in each window [w0, w1) during which ``flag`` holds (sample i's value held on [t_i, t_{i+1}))."""
    if t.size < 2:
        return np.zeros(w0.size, np.int64)
    f = flag[:-1]
    ms, me = iv.merge(t[:-1][f], t[1:][f])
    return iv.measure_in(ms, me, w0, w1)


def _robust_outliers(x: np.ndarray, min_abs: float) -> np.ndarray:
    ok = ~np.isnan(x)
    out = np.zeros(x.size, bool)
    if ok.sum() < 4:
        return out
    med = np.median(x[ok])
    mad = 1.4826 * np.median(np.abs(x[ok] - med))
    out[ok] = (x[ok] - med > OUTLIER_MADS * mad) & (x[ok] - med >= min_abs)
    return out


def power(source: Trace | RankContext, *, per_step: bool = True) -> PowerResult:
    """Power/thermal per step of one rank (a trace, or its :class:`RankContext`): per step
    window (analysis/step_windows.py: GPU time)."""
    ctx = context_of(source)
    trace = ctx.trace
    rank = trace.meta.rank if trace.meta.rank is not None else 0
    simulated = bool(trace.meta.extra.get("simulated"))
    notes: list[str] = []
    devices = trace_devices(trace)
    if not devices:
        return PowerResult(frame({}, POWER_SCHEMA), frame({}, THROTTLE_SCHEMA), simulated=simulated,
                           notes=["no power telemetry in this trace"])  # fmt: skip
    if not per_step:
        steps = trace.steps().clear()
    else:
        steps = ctx.windows.frame()
    rows: list[pl.DataFrame] = []
    throttle_rows: list[dict] = []
    for dev in devices:
        smp = device_samples(trace, dev).filter(pl.col("power_w").is_not_null())
        if smp.height < 2:
            notes.append(f"device {dev}: fewer than two power samples")
            continue
        rows.append(_device_rows(trace, rank, dev, smp, steps, throttle_rows))
        t = smp["time_ns"].to_numpy()
        if per_step and steps.height:
            outside = (steps["end_ns"] <= t[0]) | (steps["start_ns"] >= t[-1])
            if outside.any():
                notes.append(f"device {dev}: {int(outside.sum())} steps fall outside the telemetry window")
    if is_amd(trace):
        notes.append("AMD throttle status bits are reported by number (no portable bit table)")
    per = pl.concat(rows) if rows else frame({}, POWER_SCHEMA)
    thr = frame(throttle_rows, THROTTLE_SCHEMA) if throttle_rows else frame({}, THROTTLE_SCHEMA)
    return PowerResult(per, thr, simulated=simulated, notes=notes)


def _power_stats(t: np.ndarray, p: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> dict[str, np.ndarray]:
    """Per window: duration, average / peak / min power, the fastest swing and the samples."""
    nw = w0.size
    dur = (w1 - w0).astype(np.float64)
    ce = cumulative_energy(t, p, w1) - cumulative_energy(t, p, w0)
    avg = np.where(dur > 0, ce / np.where(dur > 0, dur * 1e-9, 1), np.nan)
    # samples inside each window: window 0 holds all; steps by searchsorted ranges
    lo = np.searchsorted(t, w0, side="left")
    hi = np.searchsorted(t, w1, side="right")
    nsamp = hi - lo
    peak = np.full(nw, np.nan)
    mn = np.full(nw, np.nan)
    rate = np.full(nw, np.nan)
    if t.size:
        # reduceat over sample ranges (non-empty ones)
        ne = nsamp > 0
        if ne.any():
            peak[ne] = _range_reduce(p, lo[ne], hi[ne], np.maximum)
            mn[ne] = _range_reduce(p, lo[ne], hi[ne], np.minimum)
        dpdt = np.abs(np.diff(p)) / np.maximum(np.diff(t), 1) * 1e9  # W/s, between samples j, j+1
        two = nsamp >= 2
        if two.any():
            rate[two] = _range_reduce(dpdt, lo[two], hi[two] - 1, np.maximum)
    return {"dur": dur, "avg": avg, "nsamp": nsamp, "peak": peak, "mn": mn, "rate": rate}


def _limit(
    smp: pl.DataFrame, t: np.ndarray, p: np.ndarray, w0: np.ndarray, w1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(power limit, time at or above it) per window."""
    nw = w0.size
    lim = smp["power_limit_w"].to_numpy().astype(np.float64) if "power_limit_w" in smp.columns else None
    limit_val = np.full(nw, np.nan)
    above = np.zeros(nw, np.int64)
    if lim is not None and not np.all(np.isnan(lim)):
        flag = ~np.isnan(lim) & (p >= lim)
        above = _held_measure(t, flag, w0, w1)
        limit_val[:] = np.nanmax(lim)
    return limit_val, above


def _temps(smp: pl.DataFrame, w0: np.ndarray, w1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(temperature at the start, at the end, the highest) per window."""
    nw = w0.size
    temp_s, temp_e, temp_mx = (np.full(nw, np.nan) for _ in range(3))
    tc = smp.filter(pl.col("temp_c").is_not_null())
    if tc.height:
        tt, tv = tc["time_ns"].to_numpy(), tc["temp_c"].to_numpy().astype(np.float64)
        temp_s = np.interp(w0, tt, tv)
        temp_e = np.interp(w1, tt, tv)
        tlo = np.searchsorted(tt, w0, side="left")
        thi = np.searchsorted(tt, w1, side="right")
        temp_mx = np.full(nw, np.nan)
        ne = thi > tlo
        if ne.any():
            temp_mx[ne] = _range_reduce(tv, tlo[ne], thi[ne], np.maximum)
        temp_mx = np.fmax(temp_mx, np.fmax(temp_s, temp_e))
    return temp_s, temp_e, temp_mx


def _clocks(trace: Trace, smp: pl.DataFrame, w0: np.ndarray, w1: np.ndarray) -> tuple[np.ndarray, float]:
    """(average SM clock per window, the device's highest clock)."""
    clk_avg = np.full(w0.size, np.nan)
    clk_max = np.nan
    ck = smp.filter(pl.col("sm_clock_mhz").is_not_null())
    if ck.height:
        ct, cv = ck["time_ns"].to_numpy(), ck["sm_clock_mhz"].to_numpy().astype(np.float64)
        clk_max = float(trace.meta.extra.get("max_sm_clock_mhz") or cv.max())
        clo = np.searchsorted(ct, w0, side="left")
        chi = np.searchsorted(ct, w1, side="right")
        ne = chi > clo
        csum = np.concatenate([[0.0], np.cumsum(cv)])
        clk_avg[ne] = (csum[chi[ne]] - csum[clo[ne]]) / (chi[ne] - clo[ne])
    return clk_avg, clk_max


def _throttling(
    trace: Trace,
    smp: pl.DataFrame,
    where: tuple[int, int, list[int | None]],
    w0: np.ndarray,
    w1: np.ndarray,
    throttle_rows: list[dict],
) -> np.ndarray:
    """Time throttled (a slowdown reason held) per window; a row per (window, reason) with its
    time goes to ``throttle_rows``. ``where``: (rank, device, the windows' steps)."""
    rank, dev, step_ids = where
    nw = w0.size
    throttled = np.zeros(nw, np.int64)
    th = smp.filter(pl.col("throttle_reasons").is_not_null())
    if th.height < 2:
        return throttled
    tt = th["time_ns"].to_numpy().astype(np.int64)
    mask = th["throttle_reasons"].to_numpy().astype(np.int64)
    for bit, name in _reason_names(trace, mask).items():
        m = _held_measure(tt, (mask & bit) != 0, w0, w1)
        for k in range(nw):
            if m[k]:
                throttle_rows.append(
                    {"rank": rank, "device": dev, "step": step_ids[k], "reason": name, "time_ns": int(m[k])}
                )
    slow = SLOWDOWN_MASK if not is_amd(trace) else ~0
    return _held_measure(tt, (mask & slow) != 0, w0, w1)


def _step_outliers(
    peak: np.ndarray, throttled: np.ndarray, dur: np.ndarray
) -> tuple[np.ndarray, list[str | None]]:
    """Outliers among the steps (not the total row, window 0): peak power or throttling."""
    nw = peak.size
    out = np.zeros(nw, bool)
    reason: list[str | None] = [None] * nw
    if nw > 1:
        pk = _robust_outliers(peak[1:], 0.05 * np.nanmedian(peak[1:]) if np.isfinite(peak[1:]).any() else 0)
        frac = np.where(dur[1:] > 0, throttled[1:] / np.where(dur[1:] > 0, dur[1:], 1), np.nan)
        tr = _robust_outliers(100 * frac, 1.0)
        for k in range(nw - 1):
            why = [w for w, f in (("peak power", pk[k]), ("throttling", tr[k])) if f]
            if why:
                out[k + 1] = True
                reason[k + 1] = " and ".join(why) + " above the other steps"
    return out, reason


def _device_rows(
    trace: Trace, rank: int, dev: int, smp: pl.DataFrame, steps: pl.DataFrame, throttle_rows: list[dict]
) -> pl.DataFrame:
    """The rows of one device: the whole record (window 0), then each step."""
    t = smp["time_ns"].to_numpy().astype(np.int64)
    p = smp["power_w"].to_numpy().astype(np.float64)
    w0 = np.concatenate([[t[0]], np.clip(steps["start_ns"].to_numpy(), t[0], t[-1])]).astype(np.int64)
    w1 = np.concatenate([[t[-1]], np.clip(steps["end_ns"].to_numpy(), t[0], t[-1])]).astype(np.int64)
    step_ids: list[int | None] = [None] + steps["step"].to_list()
    nw = w0.size
    st = _power_stats(t, p, w0, w1)
    dur, avg, nsamp, peak, mn, rate = (st[k] for k in ("dur", "avg", "nsamp", "peak", "mn", "rate"))
    limit_val, above = _limit(smp, t, p, w0, w1)
    temp_s, temp_e, temp_mx = _temps(smp, w0, w1)
    clk_avg, clk_max = _clocks(trace, smp, w0, w1)
    throttled = _throttling(trace, smp, (rank, dev, step_ids), w0, w1, throttle_rows)
    # steps with no overlap with the telemetry window: nothing measured
    empty = dur <= 0
    if empty.any():
        for arr in (avg, peak, mn, rate, temp_s, temp_e, temp_mx, clk_avg):
            arr[empty] = np.nan
        nsamp = np.where(empty, 0, nsamp)
    out, reason = _step_outliers(peak, throttled, dur)
    return frame(
        {
            "rank": [rank] * nw,
            "device": [dev] * nw,
            "step": step_ids,
            "start_ns": w0,
            "end_ns": w1,
            "n_samples": nsamp,
            "avg_w": avg,
            "peak_w": peak,
            "min_w": mn,
            "swing_w": peak - mn,
            "swing_rate_w_per_s": rate,
            "power_limit_w": limit_val,
            "above_limit_ns": above,
            "temp_start_c": temp_s,
            "temp_end_c": temp_e,
            "temp_max_c": temp_mx,
            "temp_rise_c": temp_e - temp_s,
            "sm_clock_avg_mhz": clk_avg,
            "sm_clock_max_mhz": [clk_max] * nw,
            "sm_clock_ratio": clk_avg / clk_max if np.isfinite(clk_max) else clk_avg * np.nan,
            "throttled_ns": throttled,
            "outlier": out,
            "outlier_reason": reason,
        },
        POWER_SCHEMA,
    ).with_columns(pl.col(pl.Float64).fill_nan(None))


def _range_reduce(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, op: np.ufunc) -> np.ndarray:
    """op.reduce over x[lo:hi] for each non-empty range (one call per window: steps, not events)."""
    return np.array(
        [op.reduce(x[a:b]) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)], dtype=np.float64
    )
