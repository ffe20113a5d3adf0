"""Machine formats for analysis results: JSON, CSV and Parquet. Formatting only.

- ``json``: one document ``{"schema": "charllm-trace/analyze", "version", "source", "ranks",
  "simulated", "options", "skipped", "notes", "frames": {name: [row, ...]}, "peaks": {...},
  "what_if": {...}}`` (docs/schema/analyze.schema.json); every frame is always there, empty
  when its analysis was not computed (``skipped`` says why); frame names
  are those of :meth:`RunAnalysis.frames` (``overlap``, ``overlap_by_group``,
  ``collectives``, ``bandwidth``, ``energy``, ``power``, ``critical_path``,
  ``critical_path_ops``, ``what_if``, ...). ``notes`` has the notes of every analysis
  (``critical_path`` and ``what_if`` included); ``what_if`` (only with ``--what-if``) has
  the factors, ``fixed_wait_pct`` and ``"predicted": true`` (its frame's ``predicted_*``
  columns are predictions, not measurements).
- ``csv`` / ``parquet``: one file per frame, ``<stem>.<frame>.csv|parquet`` beside
  ``-o FILE`` (``-o out.csv`` writes ``out.overlap.csv``, ``out.bandwidth.csv`` ...);
  without ``-o``, CSV goes to stdout with a ``# <frame>`` line before each frame.
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path
from typing import Any

import orjson

from charllm_trace.analysis.frame_schemas import FRAME_SCHEMAS, NOT_REQUESTED
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.errors import InputError
from charllm_trace.render.contract import stamp

FORMATS = ("json", "csv", "parquet")


def to_document(res: RunAnalysis) -> dict[str, Any]:
    peaks = {}
    if res.bandwidth is not None:
        peaks = {k: dataclasses.asdict(v) for k, v in res.bandwidth.peaks.items()}
    opts = dataclasses.asdict(res.options)
    for key in ("parallel", "what_if"):
        if opts.get(key) is not None:
            opts[key] = dict(opts[key])
    notes = res.notes()
    for name in ("critical_path", "what_if"):
        r: Any = getattr(res, name)
        if r is not None and r.notes and name not in notes:
            notes[name] = list(r.notes)
    have = res.frames()
    skipped = dict(res.skipped)
    frames: dict[str, list[dict[str, Any]]] = {}
    for name, (field, _cols) in FRAME_SCHEMAS.items():  # every frame, always (the contract)
        frames[name] = have[name].to_dicts() if name in have else []
        if name not in have and field not in skipped:
            skipped[field] = NOT_REQUESTED
    frames.update({k: v.to_dicts() for k, v in have.items() if k not in frames})
    doc: dict[str, Any] = {
        "source": res.source,
        "ranks": res.ranks,
        "simulated": res.simulated,
        "options": opts,
        "skipped": skipped,
        "notes": notes,
        "peaks": peaks,
        "frames": frames,
    }
    if res.what_if is not None:
        doc["what_if"] = {
            "predicted": True,
            "factors": dict(res.what_if.factors),
            "fixed_wait_pct": res.what_if.fixed_wait_pct,
            "simulated": res.what_if.simulated,
        }
    return stamp("analyze", doc)


def to_json(res: RunAnalysis) -> bytes:
    return orjson.dumps(to_document(res), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def frame_paths(output: str | os.PathLike[str], res: RunAnalysis, ext: str) -> dict[str, Path]:
    p = Path(output)
    stem = p.name[: -len(p.suffix)] if p.suffix.lower() in (".csv", ".parquet", ".pq") else p.name
    return {name: p.with_name(f"{stem}.{name}.{ext}") for name in res.frames()}


def write(
    res: RunAnalysis, fmt: str, output: str | os.PathLike[str] | None, *, force: bool = False
) -> list[str]:
    """Write ``res`` in ``fmt``; returns the paths written (empty when written to stdout,
    in which case the text is returned through :func:`render_stdout`). Refuses to
    overwrite existing files unless ``force``."""
    if fmt not in FORMATS:
        raise InputError(None, f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    if output is None:
        raise InputError(None, f"--format {fmt} needs -o FILE")
    if fmt == "json":
        targets = {"": Path(output)}
    else:
        targets = frame_paths(output, res, fmt)
    for path in targets.values():
        if path.exists() and not force:
            raise InputError(path, "already exists; pass --force to overwrite it")
        if not path.parent.exists():
            raise InputError(path.parent, "directory does not exist")
    if fmt == "json":
        Path(output).write_bytes(to_json(res))
        return [str(output)]
    frames = res.frames()
    written = []
    for name, path in targets.items():
        df = frames[name]
        if fmt == "csv":
            df.write_csv(path)
        else:
            df.write_parquet(path)
        written.append(str(path))
    return written


def render_stdout(res: RunAnalysis, fmt: str) -> str:
    if fmt == "json":
        return to_json(res).decode()
    if fmt == "csv":
        buf = io.StringIO()
        for name, df in res.frames().items():
            buf.write(f"# {name}\n")
            buf.write(df.write_csv())
        return buf.getvalue()
    raise InputError(None, f"--format {fmt} needs -o FILE")
