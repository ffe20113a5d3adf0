"""The HTML report's "Power per microbatch phase" section: the mean power and energy of each
stage's forwards, backwards and bubble per step, and the power excursion of every step (peak
above the mean, peak against the power limit). Drawing only: every number comes from
:class:`charllm_trace.analysis.phase_power_results.PhasePowerResult`."""

from __future__ import annotations

from typing import Any

from charllm_trace.analysis.phase_power_results import PhasePowerResult

PHASE_POWER_NOTE = (
    "phases: a stage's labelled forward and backward spans and its bubble (the rest of its pipeline's "
    "window); excursion: the step's peak power less its mean, and less the power limit "
    "(docs/analyses.md, Power per microbatch phase)"
)


def _n(v: float | None, fmt: str = "{:,.1f}") -> str:
    return "" if v is None else fmt.format(v)


def phase_power_parts(pp: PhasePowerResult | None) -> list[str]:
    """The section's tables (nothing without power telemetry)."""
    from charllm_trace.render import html as H
    from charllm_trace.render.report_sections import ms, notes_list

    if pp is None or pp.excursions.height == 0:
        return []
    parts = []
    if pp.phases.height:
        head = [
            "rank",
            "device",
            "step",
            "stage",
            "phase",
            "spans",
            "time ms",
            "energy J",
            "mean W",
            "GFLOP/s",
        ]
        rows = [
            [r["rank"], r["device"], r["step"], r["stage"], r["phase"], _n(r["count"], "{:,}"), ms(r["time_ns"]),
             _n(r["energy_j"], "{:,.3f}"), _n(r["avg_w"]), _n(r["flops_per_s"] and r["flops_per_s"] / 1e9, "{:,.2f}")]
            for r in pp.phases.iter_rows(named=True)
        ]  # fmt: skip
        parts.append(H.table(head, rows, scroll=True))
    head = ["rank", "device", "step", "mean W", "peak W", "peak - mean W", "limit W", "peak - limit W",
            "at/above limit ms"]  # fmt: skip
    rows = [
        [r["rank"], r["device"], "whole" if r["step"] is None else r["step"], _n(r["avg_w"]), _n(r["peak_w"]),
         _n(r["excursion_w"]), _n(r["power_limit_w"], "{:,.0f}"), _n(r["over_limit_w"], "{:+,.1f}"),
         ms(r["above_limit_ns"])]
        for r in pp.excursions.iter_rows(named=True)
    ]  # fmt: skip
    return [*parts, H.table(head, rows, scroll=True), notes_list(pp.notes)]


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
