"""Energy per GPU operator, from power telemetry joined to operator time spans.

Definitions (docs/analyses.md):

- Power between samples: ``trapezoid`` (linear between consecutive samples, the
  default) or ``step`` (each sample held until the next). The window is the first
  to the last sample; E_i is the energy of sample interval i, ∫ P dt over the window
  is Σ E_i.
- Within interval i of length Δ_i, let U_i be the time during which at least one
  operator of the device runs (union of operator spans), o_ki the time operator k
  runs in it and S_i = Σ_k o_ki. The busy energy ``E_i · U_i / Δ_i`` is split among
  the operators in proportion to o_ki / S_i (operators on concurrent streams share it);
  the idle energy is ``E_i · (Δ_i − U_i) / Δ_i``. Operators + idle = Σ E_i exactly.
- When the telemetry carries a cumulative energy counter, every figure is scaled by
  ``correction = (counter_last − counter_first) / Σ E_i``; the correction is reported.
- ``counter``: the intervals are the counter's own increments instead (``energy_counter.py``):
  power is the counter's average over each of its update periods; no correction. Without a
  usable counter, ``trapezoid`` with a note.
- Operators are GPU kernels (compute and communication), memcpys and memsets.
- Uncertainty: an operator shorter than the sensor period (the power sensor's update
  period detected from repeated readings, else the median gap between samples) does not get a power reading of its own; its energy is its time share of
  the interval's energy. ``short_pct`` says how much operator time is in such
  operators.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext, context_of
from charllm_trace.analysis.energy_counter import MIN_CHANGES, counter_intervals, update_period_ns
from charllm_trace.analysis.results import (
    ENERGY_SCHEMA,
    ENERGY_TOTAL_SCHEMA,
    WARNING,
    EnergyResult,
    frame,
)
from charllm_trace.core import intervals as iv
from charllm_trace.core.classify import launching_ops
from charllm_trace.core.model import Trace

OPERATOR_CLASSES = ("compute", "comm", "memcpy", "memset")
#: A counter correction beyond this fraction is a warning, not a note.
LARGE_CORRECTION = 0.10
IDLE = "(idle)"


def interval_energy(t: np.ndarray, p: np.ndarray, method: str = "trapezoid") -> np.ndarray:
    """Energy (J) of each interval [t_i, t_{i+1}) for samples at ``t`` (ns) of power ``p`` (W)."""
    dt = np.diff(t).astype(np.float64) * 1e-9
    if method == "trapezoid":
        return 0.5 * (p[:-1] + p[1:]) * dt
    if method == "step":
        return p[:-1] * dt
    raise ValueError(f"unknown energy method {method!r} (trapezoid or step)")


def cumulative_energy(t: np.ndarray, p: np.ndarray, q: np.ndarray, method: str = "trapezoid") -> np.ndarray:
    """∫ P dt from t[0] to each time in ``q`` (clipped to the sample window), vectorized."""
    if t.size < 2:
        return np.zeros(np.shape(q))
    e = interval_energy(t, p, method)
    cum = np.concatenate([[0.0], np.cumsum(e)])
    q = np.clip(np.asarray(q, dtype=np.int64), t[0], t[-1])
    i = np.clip(np.searchsorted(t, q, side="right") - 1, 0, t.size - 2)
    d = (q - t[i]).astype(np.float64) * 1e-9
    if method == "trapezoid":
        span = (t[i + 1] - t[i]).astype(np.float64) * 1e-9
        pq = p[i] + (p[i + 1] - p[i]) * np.where(span > 0, d / np.where(span > 0, span, 1), 0)
        part = 0.5 * (p[i] + pq) * d
    else:
        part = p[i] * d
    return cum[i] + part


def sensor_period_ns(samples: pl.DataFrame, t: np.ndarray) -> int:
    """The power sensor's update period: detected from runs of repeated readings (a sensor
    read faster than it refreshes repeats itself; collectors' ``sensor_update_period_ns``),
    else the median gap between samples."""
    from charllm_trace.core.telemetry_stats import sensor_update_period_ns

    gap = int(np.median(np.diff(t))) if t.size > 1 else 0
    per = sensor_update_period_ns(samples).get(int(samples["device"][0])) if samples.height else None
    return max(int(per), gap) if per else gap


def device_samples(trace: Trace, device: int) -> pl.DataFrame:
    return (
        trace.telemetry.filter((pl.col("device") == device) & pl.col("time_ns").is_not_null())
        .sort("time_ns")
        .unique(subset="time_ns", keep="first", maintain_order=True)
    )


def trace_devices(trace: Trace) -> list[int]:
    """Telemetry devices belonging to this rank: those its GPU operators ran on, else the
    rank's own GPU index, else every device in the telemetry."""
    tel = trace.telemetry.filter(pl.col("power_w").is_not_null())
    have = set(tel["device"].drop_nulls().unique().to_list())
    used = set(
        trace.nodes.filter(pl.col("on_gpu").fill_null(False))["device"].drop_nulls().unique().to_list()
    )
    if used & have:
        return sorted(used & have)
    if trace.meta.device_index is not None and trace.meta.device_index in have:
        return [trace.meta.device_index]
    return sorted(have)


def _split(
    t: np.ndarray, e: np.ndarray, ks: np.ndarray, ke: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Energy per operator, busy time per operator inside the window, idle energy total."""
    n = ks.size
    if t.size < 2:
        return np.zeros(n), np.zeros(n, np.int64), 0.0
    ks_c = np.clip(ks, t[0], t[-1])
    ke_c = np.clip(ke, t[0], t[-1])
    live = ke_c > ks_c
    # first and last interval touched by each operator
    a = np.clip(np.searchsorted(t, ks_c, side="right") - 1, 0, t.size - 2)
    b = np.clip(np.searchsorted(t, ke_c, side="left") - 1, 0, t.size - 2)
    cnt = np.where(live, b - a + 1, 0)
    op = np.repeat(np.arange(n), cnt)
    offs = np.arange(op.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    itv = a[op] + offs
    o = np.minimum(ke_c[op], t[itv + 1]) - np.maximum(ks_c[op], t[itv])
    o = np.maximum(o, 0)
    nint = t.size - 1
    s_sum = np.bincount(itv, weights=o, minlength=nint)
    merged = iv.merge(ks_c[live], ke_c[live])
    u = iv.measure_in(*merged, t[:-1], t[1:]).astype(np.float64)
    dt = np.diff(t).astype(np.float64)
    busy_e = np.where(dt > 0, e * u / np.where(dt > 0, dt, 1), 0.0)
    idle_e = float((e - busy_e).sum())
    per_pair = np.where(s_sum[itv] > 0, busy_e[itv] * o / np.where(s_sum[itv] > 0, s_sum[itv], 1), 0.0)
    energy = np.bincount(op, weights=per_pair, minlength=n)
    busy = np.bincount(op, weights=o, minlength=n).astype(np.int64)
    return energy, busy, idle_e


def _launcher_names(df: pl.DataFrame) -> pl.Series:
    """Name of the CPU op that launched each GPU node (``classify.launching_ops``: the
    ``launch_id`` node or the node with the same correlation id, a runtime call replaced by its
    enclosing op)."""
    names = df["name"].to_numpy()
    pos = launching_ops(df)[0]
    out = np.where(pos >= 0, names[np.maximum(pos, 0)], None)
    return pl.Series("op", out.tolist(), dtype=pl.String)


def energy(
    source: Trace | RankContext,
    *,
    method: str = "trapezoid",
    per_step: bool = True,
) -> EnergyResult:
    """Energy per operator of one rank (a trace, or its :class:`RankContext`). Raises nothing
    for a trace without telemetry: the result is empty with a note."""
    ctx = context_of(source)
    trace = ctx.trace
    rank = trace.meta.rank if trace.meta.rank is not None else 0
    notes: list[str] = []
    simulated = bool(trace.meta.extra.get("simulated"))
    devices = trace_devices(trace)
    if not devices:
        return EnergyResult(frame({}, ENERGY_TOTAL_SCHEMA), frame({}, ENERGY_SCHEMA), method, simulated=simulated,
                            notes=["no power telemetry in this trace"])  # fmt: skip
    df = ctx.phased()
    win = ctx.windows if per_step else None
    df = df.with_columns(op=_launcher_names(df)).select(
        "name", "op", "coll_type", "phase", "cls", "on_gpu", "device", "start_ns", "dur_ns"
    )
    ops_all = df.filter(
        pl.col("on_gpu").fill_null(False)
        & pl.col("cls").is_in(list(OPERATOR_CLASSES))
        & pl.col("start_ns").is_not_null()
        & pl.col("dur_ns").is_not_null()
    )
    totals: list[dict] = []
    parts: list[pl.DataFrame] = []
    single = len(devices) == 1
    for dev in devices:
        every = device_samples(trace, dev)  # the counter may be read where power was not
        smp = every.filter(pl.col("power_w").is_not_null())
        if smp.height < 2:
            notes.append(f"device {dev}: fewer than two power samples, no energy")
            continue
        ops = (
            ops_all.filter((pl.col("device") == dev) | pl.col("device").is_null()) if not single else ops_all
        )
        total, base, idle_j = _device_energy(rank, dev, (every, smp), ops, method, win, notes)
        totals.append(total)
        parts.extend(_group_parts(base, rank, dev, idle_j, win is not None and win.n > 0))
    tot = frame(totals, ENERGY_TOTAL_SCHEMA) if totals else frame({}, ENERGY_TOTAL_SCHEMA)
    if not parts:
        return EnergyResult(tot, frame({}, ENERGY_SCHEMA), method, simulated=simulated, notes=notes)
    return EnergyResult(
        tot, frame(_by_key(parts, tot), ENERGY_SCHEMA), method, simulated=simulated, notes=notes
    )


def _intervals(
    dev: int, every: pl.DataFrame, t: np.ndarray, p: np.ndarray, method: str, notes: list[str]
) -> tuple[np.ndarray, np.ndarray, Any]:
    """(interval ends, energy per interval, the counter's intervals or None): the energy
    counter's increments with ``method`` "counter" where it is usable, else the power samples'."""
    by_counter = counter_intervals(every) if method == "counter" else None
    if method == "counter" and by_counter is None:
        notes.append(
            f"device {dev}: no usable energy counter (absent, fewer than {MIN_CHANGES} changes, or "
            "reset): energy from the power samples (trapezoid)"
        )
    if by_counter is None:
        return t, interval_energy(t, p, "step" if method == "step" else "trapezoid"), None
    ct, e = by_counter
    integral = float(e.sum())
    sampled = float(np.diff(cumulative_energy(t, p, np.array([int(ct[0]), int(ct[-1])])))[0])
    notes.append(
        f"device {dev}: energy from the counter's increments (updated every "
        f"{update_period_ns(ct) / 1e6:.3g} ms); the power samples' integral over the same window "
        + (f"differs by {100 * (sampled / integral - 1):+.2f} %" if integral > 0 else "is not comparable")
    )
    return ct, e, by_counter


def _correction(
    dev: int, smp: pl.DataFrame, t: np.ndarray, p: np.ndarray, integral: float, method: str, notes: list[str]
) -> tuple[float | None, float]:
    """(the energy counter's reading, the factor scaling the samples' energy to it) where the
    samples carry a counter; (None, 1.0) otherwise or when it went backwards."""
    ctr = smp.filter(pl.col("energy_j").is_not_null())["energy_j"]
    if ctr.len() < 2:
        return None, 1.0
    ct = smp.filter(pl.col("energy_j").is_not_null())["time_ns"]
    counter = float(ctr[-1] - ctr[0])
    if int(ct[0]) != int(t[0]) or int(ct[-1]) != int(t[-1]):
        # counter over a sub-window: compare like with like
        sub = float(np.diff(cumulative_energy(t, p, np.array([int(ct[0]), int(ct[-1])]), method))[0])
        corr = counter / sub if sub > 0 else 1.0
    else:
        corr = counter / integral if integral > 0 else 1.0
    if counter < 0:
        notes.append(f"device {dev}: energy counter went backwards (reset?); not used")
        return None, 1.0
    if abs(corr - 1.0) > LARGE_CORRECTION:
        notes.append(
            f"{WARNING}device {dev}: the power samples and the energy counter disagree: energy "
            f"scaled to the counter, correction x{corr:.4f} ({100 * (corr - 1):+.2f} %); the power "
            "readings (averaging window, units) or the samples' clock alignment may be wrong"
        )
    else:
        notes.append(
            f"device {dev}: scaled to the energy counter, correction x{corr:.4f} ({100 * (corr - 1):+.2f} %)"
        )
    return counter, corr


def _step_keys(win: Any, ks: np.ndarray, n: int) -> list[str | None]:
    """The step window holding each operator's start ("(outside steps)" for none)."""
    step_key = np.full(n, None, dtype=object)
    if win is not None and win.n:
        idx = win.index_of(ks)
        ok = idx >= 0
        step_key[ok] = [str(int(x)) for x in win.step[idx[ok]]]
        step_key[~ok] = "(outside steps)"
    return step_key.tolist()


def _device_energy(
    rank: int,
    dev: int,
    samples: tuple[pl.DataFrame, pl.DataFrame],
    ops: pl.DataFrame,
    method: str,
    win: Any,
    notes: list[str],
) -> tuple[dict[str, Any], pl.DataFrame, float]:
    """One device: its totals row, its operators with their energy, busy and short time and step,
    and the idle energy (scaled to the counter)."""
    every, smp = samples
    t = smp["time_ns"].to_numpy().astype(np.int64)
    p = smp["power_w"].to_numpy().astype(np.float64)
    power_period = sensor_period_ns(smp, t)
    ti, e, by_counter = _intervals(dev, every, t, p, method, notes)
    integral = float(e.sum())
    ks = ops["start_ns"].to_numpy().astype(np.int64)
    ke = ks + ops["dur_ns"].to_numpy().astype(np.int64)
    en, busy, idle_e = _split(ti, e, ks, ke)
    if by_counter is not None:
        counter, corr = integral, 1.0  # the intervals are the counter's own: nothing to correct
    else:
        counter, corr = _correction(dev, smp, t, p, integral, method, notes)
    period = max(power_period, update_period_ns(ti)) if by_counter is not None else power_period
    short = (ke - ks) < period
    busy_total = int(busy.sum())
    short_pct = 100.0 * float(busy[short].sum()) / busy_total if busy_total else None
    total = {
        "rank": rank, "device": dev, "start_ns": int(ti[0]), "end_ns": int(ti[-1]),
        "n_samples": int(ti.size), "sensor_period_ns": period, "integral_j": integral,
        "counter_j": counter, "correction": corr, "total_j": integral * corr,
        "operators_j": float(en.sum()) * corr, "idle_j": idle_e * corr,
        "short_kernel_pct": short_pct,
    }  # fmt: skip
    if short_pct and short_pct > 0:
        notes.append(
            f"device {dev}: {short_pct:.1f} % of operator time is in operators shorter than the sensor "
            f"period ({period / 1e6:.3g} ms); their energies are time shares of a sample interval, "
            "not separate measurements"
        )
    base = ops.select("name", "op", "coll_type", "phase", "cls").with_columns(
        energy_j=pl.Series(en * corr),
        busy_ns=pl.Series(busy),
        short_ns=pl.Series(np.where(short, busy, 0)),
        step=pl.Series(_step_keys(win, ks, ops.height), dtype=pl.String),
    )
    return total, base, idle_e * corr


def _group_parts(base: pl.DataFrame, rank: int, dev: int, idle_j: float, by_step: bool) -> list[pl.DataFrame]:
    """One device's operators summed by kernel, op, collective type, phase (and step), each with
    an idle row (not by collective type)."""
    keys = {"kernel": "name", "op": "op", "coll_type": "coll_type", "phase": "phase"}
    if by_step:
        keys["step"] = "step"
    parts = []
    for group, col in keys.items():
        # by collective type: every communication kernel, one of unknown type as "(unknown)"
        comm = pl.col("coll_type").is_not_null() | (pl.col("cls") == "comm")
        sub = base if group != "coll_type" else base.filter(comm)
        agg = (
            sub.group_by(pl.col(col).fill_null("(unknown)").alias("key"))
            .agg(
                pl.len().alias("count"),
                pl.col("busy_ns").sum(),
                pl.col("energy_j").sum(),
                pl.col("short_ns").sum(),
            )
            .with_columns(group=pl.lit(group), rank=pl.lit(rank), device=pl.lit(dev))
        )
        idle_row = pl.DataFrame(
            {"key": [IDLE], "count": [0], "busy_ns": [0], "energy_j": [idle_j], "short_ns": [0],
             "group": [group], "rank": [rank], "device": [dev]},
            schema=agg.schema,
        )  # fmt: skip
        parts.append(pl.concat([agg, idle_row]) if group != "coll_type" else agg)
    return parts


def _by_key(parts: list[pl.DataFrame], tot: pl.DataFrame) -> pl.DataFrame:
    """The devices' sums merged by (rank, group, key), with each key's share of all energy."""
    all_j = float(tot["total_j"].sum())
    return (
        pl.concat(parts)
        .group_by(["rank", "group", "key"], maintain_order=True)
        .agg(
            pl.col("count").sum(), pl.col("busy_ns").sum(), pl.col("energy_j").sum(), pl.col("short_ns").sum()
        )
        .with_columns(
            share_pct=100.0 * pl.col("energy_j") / all_j if all_j > 0 else pl.lit(None, dtype=pl.Float64),
            short_pct=pl.when(pl.col("busy_ns") > 0).then(100.0 * pl.col("short_ns") / pl.col("busy_ns")),
        )
        .sort(["group", "energy_j"], descending=[False, True])
    )
