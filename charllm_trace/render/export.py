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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from charllm_trace.analysis.frame_schemas import FRAME_SCHEMAS, NOT_REQUESTED
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.core.errors import InputError
from charllm_trace.render.contract import stamp

FORMATS = ("json", "csv", "parquet")


def _head(res: RunAnalysis) -> dict[str, Any]:
    """The document, its ``frames`` a dict of frame name -> DataFrame (None: empty)."""
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
    frames: dict[str, pl.DataFrame | None] = {}
    for name, (field, _cols) in FRAME_SCHEMAS.items():  # every frame, always (the contract)
        frames[name] = have.get(name)
        if name not in have and field not in skipped:
            skipped[field] = NOT_REQUESTED
    frames.update({k: v for k, v in have.items() if k not in frames})
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
            "inferred_pct": res.what_if.inferred_pct,
            "simulated": res.what_if.simulated,
            # the prediction over steps (every rank's; the whole trace where there are none)
            "n_steps": res.what_if.n_steps,
            "step_ns": {
                "measured_median": res.what_if.measured_median_ns,
                "median": res.what_if.predicted_median_ns,
                "low": res.what_if.predicted_low_ns,
                "high": res.what_if.predicted_high_ns,
            },
            "change_pct": {
                "median": res.what_if.change_median_pct,
                "low": res.what_if.change_low_pct,
                "high": res.what_if.change_high_pct,
            },
        }
    return stamp("analyze", doc)


def to_document(res: RunAnalysis) -> dict[str, Any]:
    doc = _head(res)
    doc["frames"] = {k: [] if v is None else v.to_dicts() for k, v in doc["frames"].items()}
    return doc


_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
#: rows of a frame turned into Python objects at a time by :func:`iter_json`
JSON_CHUNK_ROWS = 512


def _rows_json(df: pl.DataFrame, chunk: int) -> Iterator[bytes]:
    """A frame's rows as they sit in the indented document (6 spaces deep), ``chunk`` at a time."""
    for i, off in enumerate(range(0, df.height, chunk)):
        body = orjson.dumps(df.slice(off, chunk).to_dicts(), option=_OPTS)[2:-2]  # "[\n" ... "\n]"
        yield (b",\n" if i else b"") + b"    " + body.replace(b"\n", b"\n    ")


def iter_json(res: RunAnalysis, chunk: int | None = None) -> Iterator[bytes]:
    """:func:`to_json`'s bytes in pieces: a frame's rows become Python objects ``chunk`` rows at
    a time, so a run with hundreds of thousands of rows (1,024 ranks: 150 MB of JSON) is written
    without the whole document in memory (default :data:`JSON_CHUNK_ROWS`)."""
    chunk = chunk or JSON_CHUNK_ROWS
    doc = _head(res)
    for i, (key, value) in enumerate(doc.items()):
        yield b"{\n" if i == 0 else b",\n"
        if key != "frames" or not value:
            yield orjson.dumps({key: value}, option=_OPTS)[2:-2]
            continue
        yield b'  "frames": {\n'
        for j, (name, df) in enumerate(value.items()):
            yield (b",\n" if j else b"") + b"    " + orjson.dumps(name)
            rows = 0
            for piece in res.frame_pieces(name, df) if df is not None else ():
                if piece.height:
                    yield b": [\n" if not rows else b",\n"
                    yield from _rows_json(piece, chunk)
                    rows += piece.height
            yield b"\n    ]" if rows else b": []"
        yield b"\n  }"
    yield b"\n}"


def to_json(res: RunAnalysis) -> bytes:
    return b"".join(iter_json(res))


def frame_paths(output: str | os.PathLike[str], res: RunAnalysis, ext: str) -> dict[str, Path]:
    p = Path(output)
    stem = p.name[: -len(p.suffix)] if p.suffix.lower() in (".csv", ".parquet", ".pq") else p.name
    return {name: p.with_name(f"{stem}.{name}.{ext}") for name in res.frames()}


def check_output(path: Path, force: bool) -> None:
    """Refuse an output path before writing: an existing one (a dangling link too: the user's)
    without ``force``, a directory, a parent that is missing or not a directory, a name too long."""
    if os.path.isdir(path):
        raise InputError(path, "is a directory; give a file name to write")
    if os.path.lexists(path) and not force:
        raise InputError(path, "already exists; pass --force to overwrite it")
    if not path.parent.is_dir():
        what = "does not exist" if not os.path.lexists(path.parent) else "is not a directory"
        raise InputError(path.parent, f"{what}: cannot write {path.name} in it")
    if len(path.name.encode()) > 255:
        raise InputError(path, "the file name is longer than 255 bytes")


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
        check_output(path, force)
    if fmt == "json":
        _write_json(res, Path(output))
        return [str(output)]
    frames = res.frames()
    written = []
    for name, path in targets.items():
        df = frames[name]
        if name in res.spilled:
            _write_pieces(res, name, df, fmt, path)
        elif fmt == "csv":
            df.write_csv(path)
        else:
            df.write_parquet(path)
        written.append(str(path))
    return written


def _write_pieces(res: RunAnalysis, name: str, df: pl.DataFrame, fmt: str, path: Path) -> None:
    """A spilled frame (``RunAnalysis.spilled``) written a piece at a time: the CSV's header, then
    each piece's rows; the Parquet file a row group per piece."""
    if fmt == "csv":
        with open(path, "wb") as f:
            df.clear().write_csv(f)
            for piece in res.frame_pieces(name, df):
                piece.write_csv(f, include_header=False)
        return
    import pyarrow.parquet as pq  # here: 0.34-0.37 s to import (load 14), which no other output needs

    schema = df.clear().to_arrow().schema
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for piece in res.frame_pieces(name, df):
            w.write_table(piece.to_arrow().cast(schema))


def _write_json(res: RunAnalysis, path: Path) -> None:
    """:func:`iter_json` into a temporary file beside ``path``, renamed into place once whole
    (a path that is not a regular file, such as ``/dev/stdout``, is written to directly)."""
    if path.exists() and not path.is_file():
        with open(path, "wb") as f:
            for piece in iter_json(res):
                f.write(piece)
        return
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            for piece in iter_json(res):
                f.write(piece)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
