"""Typed result of power per microbatch phase and the power excursion per step
(``analysis/phase_power.py``). Definitions in docs/analyses.md, "Power per microbatch phase"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: One row per (rank, device, step, phase) of a pipeline stage: its forwards, its backwards and
#: its bubble (the rest of its pipeline's window of the step).
POWER_PHASE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "device": pl.Int64,  # the telemetry device of the rank
    "step": pl.Int64,
    "stage": pl.Int64,
    "phase": pl.String,  # "forward" | "backward" | "bubble"
    "count": pl.Int64,  # labelled spans (null for the bubble)
    "time_ns": pl.Int64,  # forward/backward: Σ span durations; bubble: window - Σ span durations
    "covered_ns": pl.Int64,  # the part of time_ns inside the telemetry window
    "energy_j": pl.Float64,  # ∫ P dt over those intervals (the energy method's integral)
    "avg_w": pl.Float64,  # energy_j / covered time
    "flop": pl.Int64,  # FLOPs of the counted ops (FLOP/s analysis) that run in these intervals; null: none counted
    "flops_per_s": pl.Float64,  # flop / time_ns
}

#: One row per (rank, device, step) of the power analysis (step null: its whole window): how far
#: the peak rises above the mean and above the power limit.
POWER_EXCURSION_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "device": pl.Int64,
    "step": pl.Int64,
    "avg_w": pl.Float64,  # the power analysis' time-weighted mean
    "peak_w": pl.Float64,  # its highest sample
    "excursion_w": pl.Float64,  # peak_w - avg_w
    "power_limit_w": pl.Float64,  # null: not recorded
    "over_limit_w": pl.Float64,  # peak_w - power_limit_w (negative: below the limit)
    "above_limit_ns": pl.Int64,  # time with power >= the limit (each sample held to the next)
    "exceeds_limit": pl.Boolean,  # peak_w > power_limit_w; null without a limit
}


@dataclass
class PhasePowerResult:
    """Power per microbatch phase and the peak excursion per step (docs/analyses.md)."""

    phases: pl.DataFrame  # POWER_PHASE_SCHEMA (empty without a pipeline view)
    excursions: pl.DataFrame  # POWER_EXCURSION_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"power_phases": self.phases, "power_excursions": self.excursions}
