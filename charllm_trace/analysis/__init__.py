"""Analyses: pure functions of the trace model returning typed results.

The library API is :mod:`charllm_trace.analysis.api` (every public analysis function, under its
documented name)::

    from charllm_trace.analysis.api import analyze_run, AnalyzeOptions, overlap, bandwidth, energy, power

- :func:`~charllm_trace.analysis.api.overlap` — compute/communication overlap
- :func:`~charllm_trace.analysis.api.bandwidth` — bandwidth per collective
- :func:`~charllm_trace.analysis.api.energy` — energy per operator
- :func:`~charllm_trace.analysis.api.power` — power and thermal per step
- :func:`~charllm_trace.analysis.api.time_breakdown` — GPU time by kernel category, kernel, launching op
- :func:`~charllm_trace.analysis.api.analyze_run` — every registered analysis of a run
  (``analysis/registry.py``)
- :func:`~charllm_trace.analysis.api.critical_path` — critical paths through the execution graph
- :func:`~charllm_trace.analysis.api.what_if` — a what-if replay of the execution graph
- :func:`~charllm_trace.analysis.api.simulate` — a timeline for traces without timestamps
- :func:`~charllm_trace.analysis.api.idle_time` — GPU idle time per stream, HTA's breakdown
- :func:`~charllm_trace.analysis.api.launch_stats` — launch delays, short kernels, launch queues
- :func:`~charllm_trace.analysis.api.flops` — achieved FLOP/s and MFU of GEMM, attention and convolution ops

Functions whose name is not also a module's (``analyze_run``, ``analyze_trace``,
``time_breakdown``, ``critical_path``, ``what_if``, ``simulate``) and the result types are also
importable from this package, loaded on first use (importing ``analysis.results`` alone, e.g. to
load saved results, loads no analysis and not numpy). The names of analysis modules
(``charllm_trace.analysis.overlap`` …) are the modules: their functions are in ``analysis.api``.

Result types are in :mod:`charllm_trace.analysis.results`; the formulas in
``docs/analyses.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it (loaded on first use, so that importing one analysis
#: module, e.g. ``overlap`` from ``charllm_trace.render``, does not load them all)
_WHERE = {
    "AnalyzeOptions": "results",
    "BandwidthResult": "results",
    "BreakdownResult": "results_breakdown",
    "CriticalPathResult": "results",
    "EnergyResult": "results",
    "IdleTimeResult": "idle_results",
    "LaunchResult": "idle_results",
    "FlopsResult": "flops_results",
    "OverlapResult": "results",
    "PowerResult": "results",
    "RunAnalysis": "results",
    "WhatIfResult": "results",
    "analyze_run": "api",
    "analyze_trace": "api",
    "time_breakdown": "breakdown",
    "critical_path": "critical",
    "simulate": "whatif",
    "what_if": "whatif",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'charllm_trace.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"charllm_trace.analysis.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
