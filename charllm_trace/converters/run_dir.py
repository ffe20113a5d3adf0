"""Convert files and run directories into :class:`~charllm_trace.model.Run` objects."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from charllm_trace.converters._io import kind_of, load_json
from charllm_trace.errors import InputError
from charllm_trace.model import Run, Trace


def convert_doc(doc: dict[str, Any], path: str | os.PathLike[str]) -> tuple[Trace, dict[str, Any]]:
    """Convert one loaded JSON document (Kineto profile or host ET) into a Trace and a report."""
    k = kind_of(doc)
    if k == "kineto":
        from charllm_trace.converters.build import kineto_trace
        from charllm_trace.converters.kineto import parse_kineto

        return kineto_trace(parse_kineto(doc, path))
    raise InputError(
        path, "JSON is neither a Kineto profile (traceEvents) nor a PyTorch host execution trace (nodes)"
    )


def convert_file(path: str | os.PathLike[str]) -> Run:
    """Convert one Kineto profile or host ET file (``.json`` / ``.json.gz``) into a one-rank Run."""
    p = Path(path)
    trace, _report = convert_doc(load_json(p), p)
    return Run.single(trace, source=str(p))
