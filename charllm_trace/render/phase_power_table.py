"""Terminal tables of power per microbatch phase and of the power excursion per step
(``analysis/phase_power.py``) for ``charllm-trace analyze``. Formatting only: every number comes
from :class:`charllm_trace.analysis.phase_power_results.PhasePowerResult`."""

from __future__ import annotations

from functools import partial

from rich.console import Console

from charllm_trace.analysis.phase_power_results import POWER_EXCURSION_SCHEMA, POWER_PHASE_SCHEMA
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.render.coltable import Layout, Show, fit_table
from charllm_trace.render.table_style import legend, simulated_label, when_present
from charllm_trace.render.units import ms

PHASES = Layout(
    POWER_PHASE_SCHEMA,
    ["rank", Show("device", "dev"), "step", "stage", "phase", Show("count", "spans", "{:,}"), Show("time_ns", "ms"),
     Show("energy_j", "J"), "avg_w", Show("flops_per_s", "GFLOP/s", "{:,.2f}", div=1e9)],
    time=partial(ms, grouped=True),
)  # fmt: skip
EXCURSIONS = Layout(
    POWER_EXCURSION_SCHEMA,
    ["rank", Show("device", "dev"), Show("step", missing="whole", just="left"), "avg_w", "peak_w",
     Show("excursion_w", "peak-avg W"), Show("power_limit_w", "limit W", "{:,.0f}"),
     Show("over_limit_w", "peak-limit W", "{:+,.1f}"), Show("above_limit_ns", "at/above limit ms", "{:,.1f}", div=1e6)],
)  # fmt: skip


def render_phase_power(res: RunAnalysis, console: Console) -> None:
    pp = res.phase_power
    assert pp is not None
    if pp.phases.height:
        console.print(
            fit_table("Power per microbatch phase" + simulated_label(res), PHASES, pp.phases, keys=5)
        )
    console.print(
        fit_table("Power excursion per step" + simulated_label(res), EXCURSIONS, pp.excursions, keys=3)
    )
    legend(
        console,
        "  phases: a stage's forward and backward spans and its bubble (the rest of its pipeline's window), "
        "energy = the integral of the rank's power over them; excursion: peak - mean of the step, and "
        "peak - power limit (positive: above it); per step with --per-step",
        pp.notes,
    )


phase_power_table = when_present("phase_power", render_phase_power)
