"""The frames of an analysis' machine output, by their stable names, with their columns.

``RunAnalysis.frames()`` gives the frames a result holds; ``FRAME_SCHEMAS`` names every frame the
JSON document of ``analyze`` always carries (empty, with the reason in ``skipped``, when an
analysis was not computed) and is the source of ``docs/schema/analyze.schema.json``
(``charllm_trace.render.contract``)."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from charllm_trace.analysis.registry import ANALYSES, Live

#: frame name -> (the RunAnalysis field whose result holds it, its columns): the registry's frames
#: that every document carries (those of the analyses that are not optional)
FRAME_SCHEMAS: Mapping[str, tuple[str, dict[str, pl.DataType]]] = Live(
    lambda: {f.name: (a.name, f.columns) for a in ANALYSES if not a.optional for f in a.frames}
)
#: the frames of the optional analyses (``Analysis.optional``): in the document only when their
#: analysis ran on data the run has (CPU scheduler telemetry, graph launches)
OPTIONAL_FRAMES: Mapping[str, tuple[str, dict[str, pl.DataType]]] = Live(
    lambda: {f.name: (a.name, f.columns) for a in ANALYSES if a.optional for f in a.frames}
)
#: every registered frame, required or optional
ALL_FRAMES: Mapping[str, tuple[str, dict[str, pl.DataType]]] = Live(
    lambda: {f.name: (a.name, f.columns) for a in ANALYSES for f in a.frames}
)

#: Why a frame is empty when its analysis was not asked for (no entry in ``skipped``).
NOT_REQUESTED = "not requested"
