"""The library calls behind ``baseline``, ``check`` and ``diff``: load, analyse, extract, compare.

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
from charllm_trace.regress.baseline import Baseline, make_baseline, read_baseline
from charllm_trace.regress.compare import Comparison, compare
from charllm_trace.regress.diff import RunDiff, diff_runs
from charllm_trace.regress.headline import headline
from charllm_trace.regress.tolerance import Tolerance

#: AnalyzeOptions fields a baseline records (those that change headline figures).
RECORDED_OPTIONS = ("hta_compat", "simulate", "energy_method")


def analyze(run: Run, options: AnalyzeOptions | None = None) -> RunAnalysis:
    """The four analyses with per-step rows (headline metrics are per step)."""
    from charllm_trace.analysis import analyze_run

    opts = dataclasses.replace(options or AnalyzeOptions(), per_step=True)  # the caller's stays as it was
    return analyze_run(run, opts)


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


def baseline_run(path: str | os.PathLike[str], options: AnalyzeOptions | None = None) -> Baseline:
    """Load ``path``, analyse it and return its baseline (not yet written)."""
    from charllm_trace.inputs.loader import load

    run = load(path)
    an = analyze(run, options)
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


def check_run(
    path: str | os.PathLike[str],
    baseline_path: str | os.PathLike[str],
    tolerances: dict[str, Tolerance] | None = None,
    *,
    allow_missing: bool = False,
) -> CheckResult:
    """Compare the run at ``path`` against the baseline file, analysed with the baseline's options."""
    from charllm_trace import engine
    from charllm_trace.inputs.loader import load

    b = read_baseline(baseline_path)  # bad baseline first: no point analysing the run
    if engine.scheduler() is not None:  # on the Dask cluster: headline figures need no node table
        from charllm_trace.engine.driver import analyze_distributed

        opts = dataclasses.replace(options_from_baseline(b), per_step=True)
        an = analyze_distributed(os.fspath(path), opts)
    else:
        an = analyze(load(path), options_from_baseline(b))
    cmp = compare(
        b.metrics,
        headline(an),
        tolerances,
        allow_missing=allow_missing,
        baseline_path=os.fspath(baseline_path),
    )
    return CheckResult(comparison=cmp, baseline=b, analysis=an)


def diff_paths(
    path_a: str | os.PathLike[str],
    path_b: str | os.PathLike[str],
    options: AnalyzeOptions | None = None,
    *,
    top: int = 15,
) -> RunDiff:
    from charllm_trace.inputs.loader import load

    run_a = load(path_a)
    run_b = load(path_b)
    opts_b = dataclasses.replace(options) if options is not None else None
    return diff_runs(run_a, analyze(run_a, options), run_b, analyze(run_b, opts_b), top=top)
