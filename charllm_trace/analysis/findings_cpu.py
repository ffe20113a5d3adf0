"""The finding of "is the CPU starving the GPU?" (the sentences of ``analysis/findings.py``, same
rules: every number a :class:`Fact` of a JSON frame's row; frame ``cpu_wait``, present only for a
run with CPU scheduler telemetry).

9. the step (of any rank) where the launching thread waited for a core longest while the GPU was
   idle: the GPU idle share of the step and that wait, and the cgroup's throttled time in the step
   when there was any.
"""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.finding_types import Finding, top_row
from charllm_trace.analysis.finding_types import fact as _fact
from charllm_trace.analysis.finding_types import ms as _ms
from charllm_trace.analysis.results import RunAnalysis


def cpu_wait_findings(an: RunAnalysis) -> list[Finding]:
    if an.cpu_wait is None:
        return []
    st = an.cpu_wait.steps.filter(pl.col("gpu_idle_ns").is_not_null() & pl.col("idle_wait_ns").is_not_null())
    r = top_row(st, "idle_wait_ns", ("rank", "step"))
    if r is None:
        return []
    keys = ("rank", "step")
    idle = _fact("cpu_wait", r, keys, "gpu_idle_pct", f"{r['gpu_idle_pct']:.0f} %")
    win = _fact("cpu_wait", r, keys, "window_ns", _ms(r["window_ns"]))
    wait = _fact("cpu_wait", r, keys, "idle_wait_ns", _ms(r["idle_wait_ns"]))
    text = (
        f"Rank {r['rank']}, step {r['step']}: GPU idle {idle.text} of the step ({win.text}); the launching "
        f"thread (tid {r['tid']}) waited for a core {wait.text} of it"
    )
    facts = [idle, win, wait]
    if r["throttled_ns"]:
        thr = _fact("cpu_wait", r, keys, "throttled_ns", _ms(r["throttled_ns"]))
        text += f", and its cgroup was throttled {thr.text} of the step"
        facts.append(thr)
    return [Finding("cpu-wait", text + ".", facts)]
