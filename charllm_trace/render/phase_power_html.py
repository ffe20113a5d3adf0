"""The HTML report's "Power per microbatch phase" section: the mean power and energy of each
stage's forwards, backwards and bubble per step, and the power excursion of every step (peak
above the mean, peak against the power limit). Drawing only: every number comes from
:class:`charllm_trace.analysis.phase_power_results.PhasePowerResult`."""

from __future__ import annotations

from typing import Any

from charllm_trace.analysis.phase_power_results import (
    POWER_EXCURSION_SCHEMA,
    POWER_PHASE_SCHEMA,
    PhasePowerResult,
)
from charllm_trace.render.coltable import Show
from charllm_trace.render.report_sections import html_layout, html_rows, notes_list

PHASE_POWER_NOTE = (
    "phases: a stage's labelled forward and backward spans and its bubble (the rest of its pipeline's "
    "window); excursion: the step's peak power less its mean, and less the power limit "
    "(docs/analyses.md, Power per microbatch phase)"
)


PHASES = html_layout(
    POWER_PHASE_SCHEMA,
    ["rank", "device", "step", "stage", "phase", Show("count", "spans", "{:,}"), "time_ns", "energy_j",
     Show("avg_w", "mean W"), Show("flops_per_s", "GFLOP/s", "{:,.2f}", div=1e9)],
)  # fmt: skip
EXCURSIONS = html_layout(
    POWER_EXCURSION_SCHEMA,
    ["rank", "device", Show("step", missing="whole"), Show("avg_w", "mean W"), "peak_w",
     Show("excursion_w", "peak - mean W"), Show("power_limit_w", "limit W", "{:,.0f}"),
     Show("over_limit_w", "peak - limit W", "{:+,.1f}"), Show("above_limit_ns", "at/above limit ms")],
)  # fmt: skip


def phase_power_parts(pp: PhasePowerResult | None) -> list[str]:
    """The section's tables (nothing without power telemetry)."""
    if pp is None or pp.excursions.height == 0:
        return []
    parts = [html_rows(PHASES, pp.phases)] if pp.phases.height else []
    return [*parts, html_rows(EXCURSIONS, pp.excursions), notes_list(pp.notes)]


def phase_power_section(data: Any, rep: Any) -> None:
    """The report's section, only with power telemetry (the analysis registry's HTML renderer of
    ``phase_power``): power per microbatch phase where there is a pipeline view, else the
    excursions per step."""
    pp = data.results.get("phase_power")
    if parts := phase_power_parts(pp):
        title = (
            "Power per microbatch phase"
            if pp is not None and pp.phases.height
            else "Power excursions per step"
        )
        rep.add(title, *parts, note=PHASE_POWER_NOTE, sid="power-phases")
