"""Power per microbatch phase and the power excursion per step (the "bursty execution" of
pipelined training): for every pipeline stage and step, the energy and mean power of its forwards,
of its backwards and of its bubble (the rest of its pipeline's window), from the rank's power
samples; and per step, how far the peak rises above the step's mean and above the power limit.

Nothing is measured twice: the spans and windows are the pipeline view's
(``analysis/pipeline.py``), the integral is the energy analysis' (``energy.cumulative_energy``),
and the excursion is arithmetic on the power analysis' rows (``analysis/power.py``). Definitions:
docs/analyses.md, "Power per microbatch phase". Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.energy import cumulative_energy, device_samples, trace_devices
from charllm_trace.analysis.frame_build import frame
from charllm_trace.analysis.phase_power_results import (
    POWER_EXCURSION_SCHEMA,
    POWER_PHASE_SCHEMA,
    PhasePowerResult,
)
from charllm_trace.analysis.pipeline_results import PipelineResult
from charllm_trace.analysis.registry import Merge
from charllm_trace.analysis.results import AnalyzeOptions, PowerResult
from charllm_trace.core.model import Trace

#: Columns of a rank's power samples kept for the phases (``rank_power_samples``).
SAMPLE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "device": pl.Int64,
    "time_ns": pl.Int64,
    "power_w": pl.Float64,
}
#: Why there is no result.
NO_POWER = "no power telemetry: power per microbatch phase and per-step excursions not computed"


def rank_power_samples(rank: int, trace: Trace) -> pl.DataFrame | None:
    """The rank's power samples (its devices', ``energy.trace_devices``), in time order per device;
    None without any. What a worker sends for :func:`phase_power_from`."""
    out = []
    for dev in trace_devices(trace):
        s = device_samples(trace, dev).filter(pl.col("power_w").is_not_null())
        if s.height >= 2:
            out.append(
                s.select(
                    pl.lit(rank, pl.Int64).alias("rank"),
                    pl.col("device").cast(pl.Int64),
                    "time_ns",
                    "power_w",
                )
            )
    return frame(pl.concat(out), SAMPLE_SCHEMA) if out else None


def excursions(pw: PowerResult | None) -> pl.DataFrame:
    """The POWER_EXCURSION_SCHEMA rows of the power analysis' rows (every step, and the whole)."""
    if pw is None or pw.per_step.height == 0:
        return frame({}, POWER_EXCURSION_SCHEMA)
    lim = pl.col("power_limit_w")
    out = pw.per_step.with_columns(
        excursion_w=pl.col("peak_w") - pl.col("avg_w"),
        over_limit_w=pl.col("peak_w") - lim,
        exceeds_limit=pl.when(lim.is_not_null() & pl.col("peak_w").is_not_null()).then(
            pl.col("peak_w") > lim
        ),
    )
    return frame(out.sort("rank", "device", "step", nulls_last=False), POWER_EXCURSION_SCHEMA)


def _energies(
    t: np.ndarray, p: np.ndarray, a: np.ndarray, b: np.ndarray, method: str
) -> tuple[np.ndarray, np.ndarray]:
    """Energy (J) over each [a, b) and the part of it (ns) inside the samples' window."""
    e = cumulative_energy(t, p, b, method) - cumulative_energy(t, p, a, method)
    cov = np.clip(b, t[0], t[-1]) - np.clip(a, t[0], t[-1])
    return e, cov.astype(np.int64)


def _flop_in(t: np.ndarray, f: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FLOPs of the ops running at ``t`` (``f`` each) inside each of the disjoint intervals [a, b)."""
    order = np.argsort(a, kind="stable")
    sa, sb = a[order], b[order]
    i = np.searchsorted(sa, t, side="right") - 1
    ok = (i >= 0) & (t < sb[np.maximum(i, 0)]) & (t >= 0)
    out = np.zeros(a.size, np.int64)
    np.add.at(out, order[i[ok]], f[ok])
    return out


def _with_flop(
    mb: pl.DataFrame, st: pl.DataFrame, ops: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``mb`` and ``st`` with the FLOPs of the counted ops in each span / window (null: none counted)."""
    if ops is None or ops.height == 0:
        none = pl.lit(None, pl.Int64).alias("flop")
        return mb.with_columns(none), st.with_columns(none)
    t, f = ops["t_ns"].to_numpy(), ops["flop"].fill_null(0).to_numpy()
    in_mb = _flop_in(t, f, mb["start_ns"].to_numpy(), mb["end_ns"].to_numpy())
    in_st = _flop_in(t, f, st["start_ns"].to_numpy(), st["end_ns"].to_numpy())
    return mb.with_columns(flop=pl.Series(in_mb)), st.with_columns(flop=pl.Series(in_st))


def _device_phases(mb: pl.DataFrame, st: pl.DataFrame, smp: pl.DataFrame, method: str) -> pl.DataFrame:
    """One rank's, one device's rows: ``mb`` its labelled spans, ``st`` its stage rows (windows),
    each with its ``flop``."""
    t = smp["time_ns"].to_numpy().astype(np.int64)
    p = smp["power_w"].to_numpy().astype(np.float64)
    e, cov = _energies(t, p, mb["start_ns"].to_numpy(), mb["end_ns"].to_numpy(), method)
    spans = (
        mb.with_columns(energy_j=pl.Series(e), covered_ns=pl.Series(cov))
        .group_by("step", "stage", "kind")
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("dur_ns").sum().alias("time_ns"),
            pl.col("covered_ns").sum(),
            pl.col("energy_j").sum(),
            pl.when(pl.col("flop").is_not_null().any()).then(pl.col("flop").sum()).alias("flop"),
        )  # fmt: skip
        .rename({"kind": "phase"})
    )
    ew, covw = _energies(t, p, st["start_ns"].to_numpy(), st["end_ns"].to_numpy(), method)
    inside = spans.group_by("step").agg(
        pl.col("time_ns").sum().alias("_t"),
        pl.col("covered_ns").sum().alias("_c"),
        pl.col("energy_j").sum().alias("_e"),
        pl.col("flop").sum().alias("_f"),
    )
    bubble = (
        st.select("step", "stage", "window_ns", "flop")
        .with_columns(_ew=pl.Series(ew), _cw=pl.Series(covw))
        .join(inside, on="step", how="left")
        .select(
            "step", "stage", phase=pl.lit("bubble"), count=pl.lit(None, pl.Int64),
            time_ns=pl.col("window_ns") - pl.col("_t").fill_null(0),
            covered_ns=pl.col("_cw") - pl.col("_c").fill_null(0),
            energy_j=pl.col("_ew") - pl.col("_e").fill_null(0.0),
            flop=pl.col("flop") - pl.col("_f").fill_null(0),
        )
    )  # fmt: skip
    return pl.concat([spans, bubble], how="diagonal_relaxed").with_columns(
        device=pl.lit(int(smp["device"][0]), pl.Int64)
    )


def phases(
    pipe: PipelineResult | None,
    samples: list[pl.DataFrame],
    method: str = "trapezoid",
    op_flops: Mapping[int, pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """The POWER_PHASE_SCHEMA rows: every rank with labelled microbatches and power samples;
    ``op_flops``: each rank's counted ops (``FlopsResult.op_times``) where the FLOP/s analysis has
    them."""
    if pipe is None or not samples:
        return frame({}, POWER_PHASE_SCHEMA)
    mb = pipe.microbatches.filter(pl.col("step").is_not_null())
    rows = []
    for smp in samples:
        rank = int(smp["rank"][0])
        mine, st = mb.filter(pl.col("rank") == rank), pipe.stages.filter(pl.col("rank") == rank)
        if mine.height == 0 or st.height == 0:
            continue
        mine, st = _with_flop(mine, st, (op_flops or {}).get(rank))
        for (_dev,), s in smp.group_by("device", maintain_order=True):  # a rank's devices: few
            rows.append(_device_phases(mine, st, s, method).with_columns(rank=pl.lit(rank, pl.Int64)))
    if not rows:
        return frame({}, POWER_PHASE_SCHEMA)
    order = {"forward": 0, "backward": 1, "bubble": 2}
    out = pl.concat(rows, how="diagonal_relaxed").with_columns(
        avg_w=pl.when(pl.col("covered_ns") > 0).then(pl.col("energy_j") / (pl.col("covered_ns") * 1e-9)),
        _o=pl.col("phase").replace_strict(order, return_dtype=pl.Int64),
        flops_per_s=pl.when(pl.col("time_ns") > 0).then(pl.col("flop") / (pl.col("time_ns") * 1e-9)),
    )
    return frame(out.sort("rank", "device", "step", "_o"), POWER_PHASE_SCHEMA)


def phase_power_from(
    pipe: PipelineResult | None,
    pw: PowerResult | None,
    samples: list[pl.DataFrame],
    *,
    method: str = "trapezoid",
    op_flops: Mapping[int, pl.DataFrame] | None = None,
    simulated: bool = False,
) -> PhasePowerResult | None:
    """The run's power per microbatch phase and excursions; None without power telemetry.
    ``op_flops``: each rank's counted ops with their times (``FlopsResult.op_times``)."""
    if pw is None:
        return None
    ph = phases(pipe, samples, method, op_flops)
    notes = []
    if pipe is not None and ph.height == 0:
        notes.append("no rank with labelled microbatches has power samples: no power per microbatch phase")
    if ph.height and (ph["covered_ns"] < ph["time_ns"]).any():
        notes.append(
            "some microbatch spans lie partly outside the telemetry window: their mean power is over the covered part"
        )
    return PhasePowerResult(phases=ph, excursions=excursions(pw), simulated=simulated, notes=notes)


def rank_part(ctx: RankContext, options: AnalyzeOptions) -> pl.DataFrame | None:
    """The registry's per-rank function of ``phase_power``: the rank's power samples, only where
    it has power figures and labelled microbatches (energy's and the pipeline's parts, run before)."""
    energy, pipe = ctx.parts.get("energy"), ctx.parts.get("pipeline")
    if getattr(energy, "power", None) is None or pipe is None or pipe[0] is None or not pipe[0].height:
        return None
    return rank_power_samples(ctx.rank, ctx.trace)


def merge(m: Merge) -> PhasePowerResult | None:
    """The registry's merge of ``phase_power``: the merged pipeline and power results with every
    rank's samples and counted FLOPs (it runs after them)."""
    method = "step" if m.options.energy_method == "step" else "trapezoid"
    have = [p for p in m.parts if p.parts.get("phase_power") is not None]
    op_flops = {p.rank: p.parts["flops"][1].op_times for p in have if p.parts.get("flops") is not None}
    samples = [p.parts["phase_power"] for p in have]
    ph = phase_power_from(
        m.results.get("pipeline"), m.results.get("power"), samples, method=method, op_flops=op_flops,
        simulated=m.simulated,
    )  # fmt: skip
    if ph is None:
        m.skipped["phase_power"] = m.skipped.get("power", NO_POWER)
    return ph
