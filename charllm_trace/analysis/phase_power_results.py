"""Typed result of power per microbatch phase and the power excursion per step
(``analysis/phase_power.py``). Definitions in docs/analyses.md, "Power per microbatch phase"."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from charllm_trace.analysis.result_base import TimelineResult
from charllm_trace.analysis.schemas import POWER_EXCURSION_SCHEMA, POWER_PHASE_SCHEMA  # noqa: F401 - re-exported


@dataclass
class PhasePowerResult(TimelineResult):
    """Power per microbatch phase and the peak excursion per step (docs/analyses.md)."""

    phases: pl.DataFrame  # POWER_PHASE_SCHEMA (empty without a pipeline view)
    excursions: pl.DataFrame  # POWER_EXCURSION_SCHEMA
