"""Analyses: pure functions of the trace model returning typed results.

- :func:`overlap` — compute/communication overlap (``analysis.overlap``)
- :func:`bandwidth` — bandwidth per collective (``analysis.bandwidth``)
- :func:`energy` — energy per operator (``analysis.energy``)
- :func:`power` — power and thermal per step (``analysis.power``)
- :func:`time_breakdown` — GPU time by kernel category, kernel, launching op (``analysis.breakdown``)
- :func:`analyze_run` — all four for a run (``analysis.api``)
- :func:`critical_path` — critical paths through the execution graph (``analysis.critical``)
- :func:`what_if` — a what-if replay of the execution graph (``analysis.whatif``)
- :func:`simulate` — a timeline for traces without timestamps (``analysis.whatif``)
- :func:`idle_time` — GPU idle time per stream, HTA's breakdown (``analysis.idle_time``)
- :func:`launch_stats` — launch delays, short kernels, launch queues (``analysis.launch_stats``)
- :func:`flops` — achieved FLOP/s and MFU of GEMM, attention and convolution ops (``analysis.flops``)

Result types are in :mod:`charllm_trace.analysis.results`; the formulas in
``docs/analyses.md``.
"""

from __future__ import annotations

import importlib
import sys
import types
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
    "bandwidth": "bandwidth",
    "time_breakdown": "breakdown",
    "critical_path": "critical",
    "energy": "energy",
    "idle_time": "idle_time",
    "launch_stats": "launch_stats",
    "flops": "flops",
    "overlap": "overlap",
    "power": "power",
    "simulate": "whatif",
    "what_if": "whatif",
}

__all__ = sorted(_WHERE)

#: The analyses named like their modules. Importing a submodule makes the import system bind it on
#: its package (``setattr(charllm_trace.analysis, "overlap", <module>)``), which would shadow the
#: function; the package's class below ignores exactly those bindings, so
#: ``charllm_trace.analysis.overlap`` is always the function, loaded on first use like the rest
#: (importing ``analysis.results`` alone, e.g. to load saved results, loads no analysis and not numpy).
_SAME_NAME = frozenset({"bandwidth", "energy", "flops", "idle_time", "launch_stats", "overlap", "power"})


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SAME_NAME and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'charllm_trace.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"charllm_trace.analysis.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
