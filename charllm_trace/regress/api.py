"""The library calls behind ``baseline``, ``check`` and ``diff``: from a run's results (analysed by
``service.analyze`` with :func:`regress_options`) to a baseline, a check, a diff.

The analysis options a baseline was made with are stored in it (``input.options``)
and reused by ``check``, so both sides are computed the same way.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charllm_trace.analysis.results import AnalyzeOptions, RunAnalysis
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run
from charllm_trace.regress.baseline import Baseline, make_baseline
from charllm_trace.regress.compare import Comparison, compare
from charllm_trace.regress.headline import headline
from charllm_trace.regress.tolerance import Tolerance

#: AnalyzeOptions fields a baseline records (those that change headline figures).
RECORDED_OPTIONS = ("hta_compat", "simulate", "energy_method")


def regress_options(options: AnalyzeOptions | None = None) -> AnalyzeOptions:
    """``options`` with per-step rows (headline metrics are per step); the caller's stay as they were."""
    return dataclasses.replace(options or AnalyzeOptions(), per_step=True)


def analyze(run: Run, options: AnalyzeOptions | None = None) -> RunAnalysis:
    """The analyses of a loaded run with per-step rows (:func:`regress_options`)."""
    from charllm_trace.analysis import analyze_run

    return analyze_run(run, regress_options(options))


def describe_input(path: str | os.PathLike[str], run: Run, an: RunAnalysis) -> dict[str, Any]:
    """What a baseline was made from. Only the file name: no machine paths."""
    metas = [t.meta for t in run]
    steps: set[int] = set()
    for t in run:
        steps.update(t.steps()["step"].to_list())
    return {
        "name": Path(path).name,
        "ranks": run.ranks,
        "world_size": next((m.world_size for m in metas if m.world_size is not None), None),
        "device_models": sorted({m.device_model for m in metas if m.device_model}),
        "sources": sorted({m.source for m in metas if m.source}),
        "nodes": sum(t.nodes.height for t in run),
        "steps": sorted(steps),
        "skipped": dict(an.skipped),
        "options": {k: getattr(an.options, k) for k in RECORDED_OPTIONS},
    }


def options_from_baseline(b: Baseline) -> AnalyzeOptions:
    recorded = b.input.get("options") or {}
    return AnalyzeOptions(**{k: recorded[k] for k in RECORDED_OPTIONS if k in recorded})


def baseline_of(path: str | os.PathLike[str], run: Run, an: RunAnalysis) -> Baseline:
    """The baseline (not yet written) of ``run``, loaded from ``path`` and analysed as ``an``
    (with :func:`regress_options`): InputError when it has no headline figure to record."""
    metrics = headline(an)
    if not metrics:
        reasons = dict(an.skipped)
        if an.overlap is not None:
            reasons.setdefault("overlap", "no communication in this trace, so no overlap to guard")
        if an.bandwidth is not None:
            reasons.setdefault("bandwidth", "no collective with a measurable duration")
        why = "; ".join(f"{k}: {v}" for k, v in reasons.items())
        raise InputError(path, f"nothing to record in a baseline ({why})")
    return make_baseline(metrics, describe_input(path, run, an))


@dataclass
class CheckResult:
    comparison: Comparison
    baseline: Baseline
    analysis: RunAnalysis


def check_analysis(
    b: Baseline,
    an: RunAnalysis,
    tolerances: dict[str, Tolerance] | None = None,
    *,
    allow_missing: bool = False,
    baseline_path: str | os.PathLike[str] | None = None,
) -> CheckResult:
    """Compare a run's results ``an`` (analysed with ``regress_options(options_from_baseline(b))``)
    against the baseline ``b`` (read from ``baseline_path``)."""
    cmp = compare(
        b.metrics,
        headline(an),
        tolerances,
        allow_missing=allow_missing,
        baseline_path=None if baseline_path is None else os.fspath(baseline_path),
    )
    return CheckResult(comparison=cmp, baseline=b, analysis=an)
