"""Rank rows written where the output goes, not sent to the driver (issue 26: a driver whose
memory does not grow with ranks).

With a spill location (a directory or fsspec URL that every worker and the driver reach: the
command line puts it beside ``-o``), a worker takes the frames that are its rank's own rows
(``analysis/rank_rows.py``) out of its rank's part and writes each to
``<location>/<frame>/rank-<N>.arrow`` (Arrow IPC); the part it sends carries empty frames in
their place. The driver merges the light parts and names the files in ``RunAnalysis.spilled``,
in rank order (:class:`RowFiles`); the writers of JSON, CSV and Parquet read them back one rank
at a time (``render/export.py``). :func:`remove` deletes the location once the output is written.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from charllm_trace.analysis.rank_rows import take_rows
from charllm_trace.inputs import urls
from charllm_trace.inputs.urls import is_url


def _write(df: pl.DataFrame, target: str) -> None:
    if is_url(target):
        fs, p = urls.fs_of(target)
        fs.makedirs(p.rsplit("/", 1)[0], exist_ok=True)
        buf = io.BytesIO()
        df.write_ipc(buf)
        with fs.open(p, "wb") as f:
            f.write(buf.getvalue())
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    df.write_ipc(target)


def _read(path: str) -> pl.DataFrame:
    if is_url(path):
        fs, p = urls.fs_of(path)
        with fs.open(p, "rb") as f:
            return pl.read_ipc(io.BytesIO(f.read()))
    return pl.read_ipc(path)


def write_bytes(target: str, data: bytes) -> None:
    """``data`` written to ``target`` (a path or URL), its directory made."""
    if is_url(target):
        fs, p = urls.fs_of(target)
        fs.makedirs(p.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(p, "wb") as f:
            f.write(data)
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_bytes(data)


def read_bytes(path: str) -> bytes:
    if is_url(path):
        fs, p = urls.fs_of(path)
        with fs.open(p, "rb") as f:
            return f.read()
    return Path(path).read_bytes()


def write_rows(part: Any, where: str, top_n: int | None = None) -> dict[str, str]:
    """Write the rank rows of ``part`` (a ``RankPart``) under ``where``, leaving empty frames in
    the part; returns frame name -> the file written. ``top_n``: ``--breakdown-top``."""
    out = {}
    for name, df in take_rows(part, top_n):
        target = f"{where.rstrip('/')}/{name}/rank-{part.rank}.arrow"
        _write(df, target)
        out[name] = target
    return out


@dataclass
class RowFiles:
    """A frame's rows in files, in order: called, it reads them one at a time."""

    files: list[str]

    def __call__(self) -> Iterator[pl.DataFrame]:
        for f in self.files:
            yield _read(f)


def row_files(written: list[dict[str, str]]) -> dict[str, RowFiles]:
    """Frame name -> its files, from each rank's :func:`write_rows` (in rank order)."""
    out: dict[str, RowFiles] = {}
    for w in written:
        for name, f in w.items():
            out.setdefault(name, RowFiles([])).files.append(f)
    return out


def remove(where: str) -> None:
    """Delete the spill location and what is in it (best effort)."""
    if is_url(where):
        fs, p = urls.fs_of(where)
        try:
            fs.rm(p, recursive=True)
        except Exception:  # noqa: BLE001 - cleaning up: a location never written is fine
            pass
        return
    shutil.rmtree(where, ignore_errors=True)
