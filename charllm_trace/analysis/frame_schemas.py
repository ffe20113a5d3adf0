"""The frames of an analysis' machine output, by their stable names, with their columns.

``RunAnalysis.frames()`` gives the frames a result holds; this table names every frame the
JSON document of ``analyze`` always carries (empty, with the reason in ``skipped``, when an
analysis was not computed) and is the source of ``docs/schema/analyze.schema.json``
(``charllm_trace.render.contract``)."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from charllm_trace.analysis.registry import ANALYSES, Live

#: frame name -> (the RunAnalysis field whose result holds it, its columns): the registry's frames
FRAME_SCHEMAS: Mapping[str, tuple[str, dict[str, pl.DataType]]] = Live(
    lambda: {f.name: (a.name, f.columns) for a in ANALYSES for f in a.frames}
)

#: Why a frame is empty when its analysis was not asked for (no entry in ``skipped``).
NOT_REQUESTED = "not requested"
