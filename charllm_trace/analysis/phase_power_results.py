"""Typed result of power per microbatch phase and the power excursion per step
(``analysis/phase_power.py``). Definitions in docs/analyses.md, "Power per microbatch phase"."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.columns import Columns, frame_columns
from charllm_trace.analysis.registry import Framed

POWER_PHASE_SCHEMA: Columns = frame_columns("power_phases")
POWER_EXCURSION_SCHEMA: Columns = frame_columns("power_excursions")


@dataclass
class PhasePowerResult(Framed):
    """Power per microbatch phase and the peak excursion per step (docs/analyses.md)."""

    phases: pl.DataFrame  # POWER_PHASE_SCHEMA (empty without a pipeline view)
    excursions: pl.DataFrame  # POWER_EXCURSION_SCHEMA
    simulated: bool = False
    notes: list[str] = field(default_factory=list)
