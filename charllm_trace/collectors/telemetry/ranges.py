"""What a telemetry sample may hold: the ranges shared by the collector's CSV reader and
``telemetry import`` (a log brought in from another tool is checked like one we sampled).

Power and the energy counter feed the energy and power results: a value outside its range
(negative, beyond what a device can draw, not finite) refuses the file. The other columns are
shown, never summed: a value outside its range (a sensor's 65535 °C) becomes null, with a note
saying how many were dropped. Times must be Unix-epoch ns that fit int64, after 1990.
"""

from __future__ import annotations

import os

import polars as pl

from charllm_trace.core.errors import InputError

#: most power one device may report (W): a whole 8-GPU node draws about 10 kW
MAX_POWER_W = 20_000.0
#: largest energy counter (J): NVML counts mJ since the driver loaded, 20 kW for 15 years is 1e13 J
MAX_ENERGY_J = 1e13
#: the columns whose values enter results: (low, high); out of range refuses the file
REFUSED_OUTSIDE: dict[str, tuple[float, float]] = {
    "power_w": (0.0, MAX_POWER_W),
    "energy_j": (0.0, MAX_ENERGY_J),
    "power_limit_w": (0.0, MAX_POWER_W),
}
#: shown-only columns: (low, high); out of range becomes null, with a note
NULLED_OUTSIDE: dict[str, tuple[float, float]] = {
    "temp_c": (-100.0, 250.0),
    "mem_temp_c": (-100.0, 250.0),
    "sm_clock_mhz": (0.0, 100_000.0),
    "mem_clock_mhz": (0.0, 100_000.0),
    "util_pct": (0.0, 100.0),
}
#: sample times (Unix ns): after 1990-01-01 and before int64 runs out (2262)
MIN_TIME_NS = 631_152_000 * 10**9
MAX_TIME_NS = 2**63 - 1


def _outside(col: str, lo: float, hi: float) -> pl.Expr:
    c = pl.col(col)
    return c.is_not_null() & (c.is_nan() | (c < lo) | (c > hi))


def check_times(path: str | os.PathLike[str], frame: pl.DataFrame, low: int = MIN_TIME_NS) -> None:
    """Refuse sample times before ``low`` (imported logs: 1990; the sampler's CSV: 0, a negative
    time is not Unix-epoch ns)."""
    if frame.height == 0:
        return
    lo = frame["time_ns"].min()
    if lo is not None and int(lo) < low:  # type: ignore[arg-type]
        when = "before 1990" if low == MIN_TIME_NS else "negative"
        raise InputError(path, f"a sample time of {int(lo)} ns is {when}: not Unix-epoch time")  # type: ignore[arg-type]


def check_refused(path: str | os.PathLike[str], frame: pl.DataFrame) -> None:
    """InputError for a power or energy value outside its range (``TELEMETRY_SCHEMA`` frame)."""
    present = set(frame.columns)
    for col, (lo, hi) in REFUSED_OUTSIDE.items():
        if col not in present:
            continue
        bad = frame.filter(_outside(col, lo, hi))
        if bad.height:
            v = bad[col][0]
            raise InputError(
                path,
                f"{col} {v!r:.24} at {bad['time_ns'][0]} ns (device {bad['device'][0]}) is outside "
                f"{lo:g}..{hi:g}; {bad.height} such samples",
            )


def check_values(path: str | os.PathLike[str], frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """``frame`` (``TELEMETRY_SCHEMA``) with out-of-range shown-only values nulled, and notes
    saying how many; InputError for a power or energy value outside its range."""
    check_refused(path, frame)
    present = set(frame.columns)
    notes = []
    for col, (lo, hi) in NULLED_OUTSIDE.items():
        if col not in present:
            continue
        n = frame.select(_outside(col, lo, hi).sum()).item()
        if n:
            frame = frame.with_columns(
                pl.when(_outside(col, lo, hi)).then(None).otherwise(pl.col(col)).alias(col)
            )
            notes.append(f"{n} {col} values outside {lo:g}..{hi:g} ignored (shown as missing)")
    return frame, notes
