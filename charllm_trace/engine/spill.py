"""Rank rows written where the output goes, not sent to the driver (issue 26: a driver whose
memory does not grow with ranks).

With a spill location (a directory or fsspec URL that every worker and the driver reach: the
command line puts it beside ``-o``), a worker takes the frames that are its rank's own rows
(``analysis/rank_rows.py``) out of its rank's part and writes each to
``<location>/<frame>/rank-<N>.arrow`` (Arrow IPC); the part it sends carries empty frames in
their place. The merge, which with a spill location runs on a worker
(``engine/driver.reduce_task``), takes the light parts and names the files in
``RunAnalysis.spilled``, in rank order (:class:`RowFiles`); it then writes the merged frames'
rows there too, :data:`PIECE_ROWS` rows a file (:func:`move_held_rows`), so that the result sent
to the driver holds no rows. The writers of JSON, CSV and Parquet read them back a file at a
time (``render/export.py``). :func:`remove` deletes the location once the output is written.
"""

from __future__ import annotations

import io
import shutil
from array import array
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
        target = rows_file(where, name, part.rank)
        _write(df, target)
        out[name] = target
    return out


def rows_file(where: str, name: str, rank: int) -> str:
    """Where a rank's rows of the frame ``name`` are written under the spill location ``where``."""
    return f"{where.rstrip('/')}/{name}/rank-{rank}.arrow"


@dataclass
class RowFiles:
    """A frame's rows in files, in order (those of ``ranks``: :func:`rows_file`): called, it reads
    them one at a time."""

    where: str
    name: str
    ranks: array[int]

    def __call__(self) -> Iterator[pl.DataFrame]:
        for r in self.ranks:
            yield _read(rows_file(self.where, self.name, r))


class Written:
    """The files the workers wrote (:func:`write_rows`), as the driver holds them until the
    output is written: per frame, the numbers of the ranks that wrote one (8 bytes each), not
    the paths (a path and a dict per rank: ~2 kB per rank)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.ranks: dict[str, array[int]] = {}
        self.index: dict[str, array[int]] = {}  # the parts' places, as gathered (for drop)
        self.n = 0

    def add(self, rank: int, files: dict[str, str]) -> None:
        """The files a rank's task wrote (the next part gathered), each where :func:`rows_file` says."""
        for name, f in files.items():
            if f != rows_file(self.where, name, rank):
                raise ValueError(f"rank {rank} wrote its {name} rows to {f}, not where the driver reads them")
            self.ranks.setdefault(name, array("q")).append(rank)
            self.index.setdefault(name, array("q")).append(self.n)
        self.n += 1

    def drop(self, i: int, name: str) -> None:
        """The ``i``-th part's file of ``name`` left unread (``RowsFold.apply``)."""
        idx = self.index.get(name)
        if idx is None or i not in idx:
            return
        k = idx.index(i)
        del idx[k], self.ranks[name][k]

    def files(self) -> dict[str, RowFiles]:
        """Frame name -> its files, in the order gathered (rank order)."""
        return {name: RowFiles(self.where, name, r) for name, r in self.ranks.items() if len(r)}


#: rows of a merged frame per file written by :func:`move_held_rows` (a piece the writers read at once)
PIECE_ROWS = 4096


def held_file(where: str, name: str, i: int) -> str:
    """Where the ``i``-th piece of the merged frame ``name``'s rows is written under ``where``."""
    return f"{where.rstrip('/')}/held/{name}/piece-{i}.arrow"


@dataclass
class PieceFiles:
    """A merged frame's rows in files (:func:`held_file`, ``n`` of them): called, it reads them
    one at a time."""

    where: str
    name: str
    n: int

    def __call__(self) -> Iterator[pl.DataFrame]:
        for i in range(self.n):
            yield _read(held_file(self.where, self.name, i))


def move_held_rows(res: Any, where: str, rows: int = PIECE_ROWS) -> None:
    """Every frame's rows that ``res`` (a merged ``RunAnalysis``) holds written under ``where``,
    ``rows`` to a file, and taken out of it (``RunAnalysis.move_rows``): what travels from the
    worker that merged to the process that writes the output is then the result without rows,
    and that process reads them back a file at a time."""
    for name, df in res.frames().items():
        if df.height == 0:
            continue
        n = 0
        for off in range(0, df.height, rows):
            _write(df.slice(off, rows), held_file(where, name, n))
            n += 1
        res.move_rows(name, PieceFiles(where, name, n))


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
