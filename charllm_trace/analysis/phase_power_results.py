"""Typed result of power per microbatch phase and the power excursion per step
(``analysis/phase_power.py``). Definitions in docs/analyses.md, "Power per microbatch phase"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Col, Columns, columns

#: One row per (rank, device, step, phase) of a pipeline stage: its forwards, its backwards and
#: its bubble (the rest of its pipeline's window of the step).
POWER_PHASE_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("device", pl.Int64, "", "the telemetry device of the rank"),
    Col("step", pl.Int64),
    Col("stage", pl.Int64),
    Col("phase", pl.String, "", '"forward" | "backward" | "bubble"'),
    Col("count", pl.Int64, "", "labelled spans (null for the bubble)"),
    Col("time_ns", pl.Int64, "ns", "forward/backward: Σ span durations; bubble: window - Σ span durations"),
    Col("covered_ns", pl.Int64, "ns", "the part of time_ns inside the telemetry window"),
    Col("energy_j", pl.Float64, "J", "∫ P dt over those intervals (the energy method's integral)"),
    Col("avg_w", pl.Float64, "W", "energy_j / covered time"),
    Col(
        "flop",
        pl.Int64,
        "FLOP",
        "FLOPs of the counted ops (FLOP/s analysis) that run in these intervals; null: none counted",
    ),
    Col("flops_per_s", pl.Float64, "FLOP/s", "flop / time_ns"),
)

#: One row per (rank, device, step) of the power analysis (step null: its whole window): how far
#: the peak rises above the mean and above the power limit.
POWER_EXCURSION_SCHEMA: Columns = columns(
    Col("rank", pl.Int64),
    Col("device", pl.Int64),
    Col("step", pl.Int64),
    Col("avg_w", pl.Float64, "W", "the power analysis' time-weighted mean"),
    Col("peak_w", pl.Float64, "W", "its highest sample"),
    Col("excursion_w", pl.Float64, "W", "peak_w - avg_w"),
    Col("power_limit_w", pl.Float64, "W", "null: not recorded"),
    Col("over_limit_w", pl.Float64, "W", "peak_w - power_limit_w (negative: below the limit)"),
    Col("above_limit_ns", pl.Int64, "ns", "time with power >= the limit (each sample held to the next)"),
    Col("exceeds_limit", pl.Boolean, "", "peak_w > power_limit_w; null without a limit"),
)


@dataclass
class PhasePowerResult:
    """Power per microbatch phase and the peak excursion per step (docs/analyses.md)."""

    phases: pl.DataFrame  # POWER_PHASE_SCHEMA (empty without a pipeline view)
    excursions: pl.DataFrame  # POWER_EXCURSION_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"power_phases": self.phases, "power_excursions": self.excursions}
