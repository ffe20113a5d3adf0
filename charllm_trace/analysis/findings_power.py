"""Findings of power per microbatch phase (the sentences of ``analysis/findings.py``, same rules:
every number a :class:`Fact` of a JSON frame's row).

9. power excursions: when a step's peak power exceeds the device's power limit, the step that
   exceeds it the most: its peak, how far above the limit and above the step's mean, how long it
   drew at least the limit, and how many steps exceeded it; with a pipeline, the microbatch phase
   of that rank and step with the highest mean power.
"""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.finding_types import Fact, Finding, top_row
from charllm_trace.analysis.finding_types import fact as _fact
from charllm_trace.analysis.results import RunAnalysis


def _phase(an: RunAnalysis, r: dict) -> tuple[str, list[Fact]]:
    assert an.phase_power is not None
    ph = an.phase_power.phases.filter(
        (pl.col("rank") == r["rank"])
        & (pl.col("device") == r["device"])
        & pl.col("step").eq_missing(r["step"])
    ).filter(pl.col("avg_w").is_not_null())
    hi = top_row(ph, "avg_w", ("stage", "phase"))
    if hi is None:
        return "", []
    keys = ("rank", "device", "step", "phase")
    f = _fact("power_phases", hi, keys, "avg_w", f"{hi['avg_w']:.0f} W")
    return f"; its {hi['phase']} phase averaged {f.text}", [f]


def power_excursion_findings(an: RunAnalysis) -> list[Finding]:
    if an.phase_power is None:
        return []
    ex = an.phase_power.excursions.filter(pl.col("exceeds_limit").fill_null(False))
    steps = ex.filter(pl.col("step").is_not_null())
    r = top_row(steps if steps.height else ex, "over_limit_w", ("rank", "step"))
    if r is None:
        return []
    keys = ("rank", "device", "step")
    pk = _fact("power_excursions", r, keys, "peak_w", f"{r['peak_w']:.0f} W")
    ov = _fact("power_excursions", r, keys, "over_limit_w", f"{r['over_limit_w']:.0f} W")
    lim = _fact("power_excursions", r, keys, "power_limit_w", f"{r['power_limit_w']:.0f} W")
    exc = _fact("power_excursions", r, keys, "excursion_w", f"{r['excursion_w']:.0f} W")
    av = _fact("power_excursions", r, keys, "avg_w", f"{r['avg_w']:.0f} W")
    ab = _fact("power_excursions", r, keys, "above_limit_ns", f"{(r['above_limit_ns'] or 0) / 1e6:,.1f} ms")
    where = f"In step {r['step']}, rank" if r["step"] is not None else "Rank"
    text = (
        f"{where} {r['rank']} GPU {r['device']} peaked at {pk.text}, {ov.text} above its {lim.text} power "
        f"limit and {exc.text} above the mean of {av.text}; it drew at least the limit for {ab.text}"
    )
    if steps.height:
        total = an.phase_power.excursions.filter(pl.col("step").is_not_null()).height
        text += f" ({steps.height} of {total} rank-steps peaked above the limit)"
    more, facts = _phase(an, r)
    return [Finding("power-phases", text + more + ".", [pk, ov, lim, exc, av, ab, *facts])]
