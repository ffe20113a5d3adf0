"""Validate NVML telemetry against the hardware on a real NVIDIA GPU (issue 7).

    python benchmarks/validate_nvml.py --out nvml_validation.json [--raw raw.csv.gz]

Reads device 0 in a tight loop for ``--idle`` seconds, then while a separate process runs a
sustained bf16 matrix-product burst for ``--burst`` seconds, then idle again, and reports:

- the read rate: how many power readings per second one process gets (the highest rate a
  sampler can reach), and the rate of our backend's full read (``NvmlBackend.read``: every sensor);
- the sensor update period of each power source (``NVML_FI_DEV_POWER_INSTANT`` and
  ``nvmlDeviceGetPowerUsage``) and of the energy counter: the median time between changes of the
  reading (``core/telemetry_stats.py``'s rule);
- the largest gap between consecutive readings;
- the energy counter's delta over the window against the time integral (trapezoid) of each power
  source over the same window: the difference in percent;
Sampling never pauses (a gap would be bridged by a straight line in the integral). Per phase (idle
before, the burst process's start-up and warm-up, burst, idle after): mean power, mean SM clock, temperature range, and
  the clock-event (throttle) reasons seen, by name.

Nothing here is asserted: the figures are written down (tests/fixtures/traces/h200-1rank-nccl/README.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

BURST = r"""
import sys, time, torch
secs = float(sys.argv[1]); n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize(); print("ready", flush=True)
t0 = time.perf_counter(); k = 0
while time.perf_counter() - t0 < secs:
    for _ in range(20): a @ b
    k += 20; torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"burst {k} products in {dt:.3f} s: {2 * n**3 * k / dt / 1e12:.1f} TFLOP/s", flush=True)
"""


def update_period_ns(t: np.ndarray, v: np.ndarray) -> float | None:
    """Median time between changes of ``v`` (first run dropped: it began before sampling)."""
    ok = ~np.isnan(v)
    t, v = t[ok], v[ok]
    if len(v) < 3:
        return None
    chg = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
    gaps = np.diff(t[chg])[1:]
    return float(np.median(gaps)) if len(gaps) >= 2 else None


def trapezoid_j(t_ns: np.ndarray, p_w: np.ndarray) -> float:
    ok = ~np.isnan(p_w)
    t, p = t_ns[ok] / 1e9, p_w[ok]
    return float(np.sum((p[1:] + p[:-1]) * 0.5 * np.diff(t)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--raw", default=None, help="also write every reading to this .csv.gz")
    ap.add_argument("--idle", type=float, default=3.0)
    ap.add_argument("--burst", type=float, default=8.0)
    ap.add_argument("--full-read-s", type=float, default=1.0, help="seconds of full backend reads to time")
    args = ap.parse_args()

    import pynvml

    from charllm_trace.analysis.power import THROTTLE_REASONS
    from charllm_trace.collectors.telemetry.backends import NvmlBackend

    backend = NvmlBackend()
    nv = pynvml
    h = backend.handles[0]
    fid = nv.NVML_FI_DEV_POWER_INSTANT
    events = (
        getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )

    # 1. our backend's full read: how fast can a sampler go?
    t0 = time.perf_counter()
    n_full = 0
    while time.perf_counter() - t0 < args.full_read_s:
        backend.read(0)
        n_full += 1
    full_rate = n_full / (time.perf_counter() - t0)

    # 2. tight loop over the phases
    rows: list[tuple[float, ...]] = []
    phase_marks: dict[str, int] = {}

    def sample_for(seconds: float, until: Callable[[], bool] | None = None) -> None:
        end = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < end if until is None else not until():
            ta = time.time_ns()
            inst = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
            p_inst = inst.value.uiVal / 1000.0 if inst.nvmlReturn == 0 else float("nan")
            p_avg = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
            e = nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
            if i % 20 == 0:
                sm = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                temp = float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
                reasons = float(events(h))
            else:
                sm = temp = reasons = float("nan")
            tb = time.time_ns()
            rows.append(((ta + tb) / 2, p_inst, p_avg, e, sm, temp, reasons))
            i += 1

    phase_marks["idle_before"] = len(rows)
    sample_for(args.idle)
    burst = subprocess.Popen(
        [sys.executable, "-c", BURST, str(args.burst)], stdout=subprocess.PIPE, text=True
    )
    assert burst.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def read_output() -> None:  # sampling never stops while the burst process starts up
        for line in burst.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.startswith("ready"):
                ready.set()
        ready.set()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    phase_marks["warm_up"] = len(rows)  # CUDA context and warm-up products: not the burst phase
    sample_for(0, ready.is_set)
    phase_marks["burst"] = len(rows)
    sample_for(0, lambda: burst.poll() is not None)
    reader.join(timeout=10)
    burst_out = "".join(lines)
    phase_marks["idle_after"] = len(rows)
    sample_for(args.idle)
    phase_marks["end"] = len(rows)

    a = np.array(rows, dtype=np.float64)
    t, p_inst, p_avg, e, sm, temp, reasons = a.T
    t = t.astype(np.int64)
    span_s = (t[-1] - t[0]) / 1e9
    counter_j = float(e[-1] - e[0])
    res: dict[str, object] = {
        "device": backend.devices[0],
        "driver": nv.nvmlSystemGetDriverVersion(),
        "nvml": nv.nvmlSystemGetNVMLVersion(),
        "full_backend_read_hz": round(full_rate, 1),
        "tight_loop_read_hz": round(len(t) / span_s, 1),
        "window_s": round(span_s, 3),
        "max_gap_ms": round(float(np.diff(t).max()) / 1e6, 3),
        "sensor_update_period_ms": {
            "power_instant": _ms(update_period_ns(t, p_inst)),
            "power_usage_avg": _ms(update_period_ns(t, p_avg)),
            "energy_counter": _ms(update_period_ns(t, e)),
        },
        "energy_counter_delta_j": round(counter_j, 3),
        "integral_power_instant_j": round(trapezoid_j(t, p_inst), 3),
        "integral_power_usage_avg_j": round(trapezoid_j(t, p_avg), 3),
        "burst_output": burst_out.strip().splitlines(),
        "phases": {},
    }
    for key in ("integral_power_instant_j", "integral_power_usage_avg_j"):
        v = res[key]
        res[key.replace("_j", "_vs_counter_pct")] = round(100 * (v - counter_j) / counter_j, 3)  # type: ignore[operator]
    names = list(phase_marks)
    for lo_name, hi_name in zip(names, names[1:], strict=False):
        lo, hi = phase_marks[lo_name], phase_marks[hi_name]
        if hi - lo < 2:
            continue
        sl = slice(lo, hi)
        bits = np.unique(reasons[sl][~np.isnan(reasons[sl])].astype(np.int64))
        seen = sorted({name for b in bits for bit, name in THROTTLE_REASONS.items() if b & bit})
        dur = (t[hi - 1] - t[lo]) / 1e9
        res["phases"][lo_name] = {  # type: ignore[index]
            "seconds": round(dur, 3),
            "mean_power_instant_w": _r(np.nanmean(p_inst[sl])),
            "max_power_instant_w": _r(np.nanmax(p_inst[sl])),
            "mean_power_usage_avg_w": _r(np.nanmean(p_avg[sl])),
            "counter_avg_w": _r((e[hi - 1] - e[lo]) / dur) if dur > 0 else None,
            "mean_sm_clock_mhz": _r(np.nanmean(sm[sl])),
            "min_sm_clock_mhz": _r(np.nanmin(sm[sl])),
            "temp_c": [_r(np.nanmin(temp[sl])), _r(np.nanmax(temp[sl]))],
            "reasons_seen": seen,
        }
    backend.close()
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))
    if args.raw:
        with gzip.open(args.raw, "wt") as f:
            f.write("time_ns,power_instant_w,power_usage_avg_w,energy_j,sm_clock_mhz,temp_c,reasons\n")
            for row in a:
                f.write(f"{int(row[0])}," + ",".join("" if np.isnan(x) else f"{x:g}" for x in row[1:]) + "\n")


def _ms(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def _r(x: float) -> float | None:
    return None if x is None or np.isnan(x) else round(float(x), 2)


if __name__ == "__main__":
    main()
