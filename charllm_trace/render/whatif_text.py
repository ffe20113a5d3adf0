"""The words of a what-if prediction, shared by the terminal table and the HTML report: the
PREDICTED step time with its range over steps, and what the prediction rests on. Formatting
only: every figure comes from :class:`charllm_trace.analysis.results.WhatIfResult`."""

from __future__ import annotations

from functools import partial

from charllm_trace.analysis.results import WhatIfResult
from charllm_trace.analysis.whatif_keys import describe
from charllm_trace.render.units import ms

_ms = partial(ms, missing="n/a", grouped=True)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.1f}"


def keys_text(wi: WhatIfResult) -> str:
    return describe(wi.factors)


def headline(wi: WhatIfResult) -> str:
    """``PREDICTED step time 12.345 ms (range 12.000–12.600 ms over 8 steps; measured median 10.000 ms),
    change +23.4 % (range +20.0 … +26.0 %)``."""
    if wi.n_steps == 0:
        return "PREDICTED: no step or trace window to predict"
    what = "steps" if wi.n_steps != 1 else "step"
    return (
        f"PREDICTED step time {_ms(wi.predicted_median_ns)} ms (median; range {_ms(wi.predicted_low_ns)}–"
        f"{_ms(wi.predicted_high_ns)} ms over {wi.n_steps} {what}; measured median "
        f"{_ms(wi.measured_median_ns)} ms), change {_pct(wi.change_median_pct)} % "
        f"(range {_pct(wi.change_low_pct)} … {_pct(wi.change_high_pct)} %)"
    )


def basis(wi: WhatIfResult) -> str | None:
    """What the prediction rests on, or None when unknown (no timestamps)."""
    parts = []
    if wi.fixed_wait_pct is not None:
        parts.append(
            f"{wi.fixed_wait_pct:.1f} % of the measured critical path is waiting the trace does not explain "
            "(kept as measured, never scaled)"
        )
    if wi.inferred_pct is not None:
        parts.append(f"{wi.inferred_pct:.1f} % is on inferred edges (wake-ups, thread starts)")
    return "rests on: " + "; ".join(parts) if parts else None
