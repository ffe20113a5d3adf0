"""What every result type of an analysis has, declared once: its frames by their stable names
(as its registry entry lists them) and its notes; a result computed on the trace's timeline also
says whether that timeline was simulated.

The shared fields are keyword-only (``notes=...``, ``simulated=...``): a result type lists its own
frames and figures first, positionally, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from charllm_trace.analysis.registry import entry_of


class Framed:
    """:meth:`frames`: the result's frames by their stable names, as the registry's entry of its
    type lists them (the frames are declared once, there)."""

    def frames(self) -> dict[str, pl.DataFrame]:
        return entry_of(type(self)).frames_of(self)


@dataclass(kw_only=True)
class Result(Framed):
    """A result: its frames and figures (the subclass' fields) and its notes, plain sentences in
    order (``RunAnalysis.notes`` gathers them)."""

    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class TimelineResult(Result):
    """A result computed on the trace's timeline: ``simulated`` True when ``--simulate`` rebuilt
    that timeline from dependencies and durations (every figure of it is then simulated)."""

    simulated: bool = False
