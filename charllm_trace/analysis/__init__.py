"""Analyses: pure functions of the trace model returning typed results.

- :func:`overlap` — compute/communication overlap (``analysis.overlap``)
- :func:`bandwidth` — bandwidth per collective (``analysis.bandwidth``)
- :func:`energy` — energy per operator (``analysis.energy``)
- :func:`power` — power and thermal per step (``analysis.power``)
- :func:`analyze_run` — all four for a run (``analysis.api``)
- :func:`simulate` — a timeline for traces without timestamps (``analysis.simulate``)

Result types are in :mod:`charllm_trace.analysis.results`; the formulas in
``docs/analyses.md``.
"""

from charllm_trace.analysis.api import analyze_run, analyze_trace
from charllm_trace.analysis.bandwidth import bandwidth
from charllm_trace.analysis.energy import energy
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.power import power
from charllm_trace.analysis.results import (
    AnalyzeOptions,
    BandwidthResult,
    EnergyResult,
    OverlapResult,
    PowerResult,
    RunAnalysis,
)
from charllm_trace.analysis.simulate import simulate

__all__ = [
    "AnalyzeOptions",
    "BandwidthResult",
    "EnergyResult",
    "OverlapResult",
    "PowerResult",
    "RunAnalysis",
    "analyze_run",
    "analyze_trace",
    "bandwidth",
    "energy",
    "overlap",
    "power",
    "simulate",
]
