"""One rank's inputs to the analyses, computed once: :class:`RankContext`.

Every per-rank analysis reads the same derived tables of a rank: its classified nodes
(:func:`~charllm_trace.core.classify.classify`), their phases (energy), and its step windows
(:func:`~charllm_trace.analysis.step_windows.step_windows`: the GPU-time windows every per-step
figure uses). The context computes each of them at most once, on first use, and the analyses take
the context (or a bare trace, for which :func:`context_of` makes one): no analysis classifies or
cuts steps on its own. ``analyze_run`` builds one context per rank (``analysis/rank_parts.py``)
and passes it to every analysis of the registry (``analysis/registry.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from charllm_trace.analysis.step_windows import StepWindows, step_windows
from charllm_trace.core.classify import classify, with_phase
from charllm_trace.core.model import Trace


@dataclass
class RankContext:
    """One rank's trace and what every analysis derives from it, each computed at most once.

    ``trace``: the timeline analysed (a simulated copy where one was rebuilt); ``classified``: its
    nodes with the ``cls`` column (of the recorded trace: classes do not depend on times);
    ``recorded``: the recorded trace's classified nodes (the execution graph of a simulated run).
    ``dims``: process group -> parallel dimension (of the whole run); ``hosts``: every rank's
    host; ``node_gpus``: the run's GPUs per node, when known; ``untimed``: the rank has no
    timestamps and was not simulated (the analyses that need times skip it)."""

    trace: Trace
    classified: pl.DataFrame
    recorded: pl.DataFrame | None = None
    rank: int = 0
    dims: Mapping[str, str | None] = field(default_factory=dict)
    hosts: Mapping[int, str | None] = field(default_factory=dict)
    node_gpus: int | None = None
    untimed: bool = False  # no timestamps (and not simulated): the timed analyses are skipped
    marker_notes: list[str] = field(default_factory=list)  # what --step-marker's steps note
    parts: dict[str, Any] = field(default_factory=dict)  # the parts of the analyses run before, by name
    _windows: StepWindows | None = field(default=None, repr=False)
    _phased: bool = field(default=False, repr=False)

    @classmethod
    def of(cls, trace: Trace, **kw: object) -> RankContext:
        """The context of ``trace`` alone: its nodes classified here (the one place that does)."""
        classified = classify(trace.nodes)
        rank = trace.meta.rank if trace.meta.rank is not None else 0
        return cls(trace=trace, classified=classified, recorded=classified, rank=rank, **kw)  # type: ignore[arg-type]

    @property
    def windows(self) -> StepWindows:
        """The rank's step windows (``step_windows``), cut on first use."""
        if self._windows is None:
            self._windows = step_windows(self.trace, self.classified)
        return self._windows

    def phased(self) -> pl.DataFrame:
        """The classified nodes with energy's ``phase`` column, added once; from then on
        ``classified`` holds it (the report and the execution graph read the same frame)."""
        if not self._phased:
            self.classified = with_phase(self.classified)
            self._phased = True
        return self.classified


def context_of(source: Trace | RankContext) -> RankContext:
    """``source`` itself when it is a context, else the context of the bare trace."""
    return source if isinstance(source, RankContext) else RankContext.of(source)
