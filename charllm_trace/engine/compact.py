"""Ranks' parts held compactly by the driver (issue 11: its memory at 1,024 ranks).

Each rank's analysis part (``analysis/rank_parts.RankPart``) arrives as a dozen small frames of a
few rows. Unpickled one by one, a small frame costs ~8 kB of buffers and headers whatever its
rows (measured: 2.9 kB pickled, 7.9 kB resident for a one-row overlap frame; docs/scale.md), so
1,024 ranks' parts are ~100 MB of overhead. :func:`compact_batch` concatenates a gathered batch's
frames that sit at the same place in every part (same schema) into one frame each and gives each
part a slice of it back (~3 kB per slice, its rows shared): the parts are equal to what arrived,
frame for frame, so the merge computes the same results.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl

#: a place in a part: attribute names, tuple indices and ("key", name) of dicts from the part down to a frame
Path = tuple[str | int | tuple[str, str], ...]


def _frames(obj: Any, path: Path, out: dict[Path, pl.DataFrame], depth: int = 0) -> None:
    if isinstance(obj, pl.DataFrame):
        out[path] = obj
    elif depth > 4:
        return
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _frames(getattr(obj, f.name), (*path, f.name), out, depth + 1)
    elif isinstance(obj, tuple | list):
        for i, x in enumerate(obj):
            _frames(x, (*path, i), out, depth + 1)
    elif isinstance(obj, dict):  # a part's per-analysis parts, by name (analysis/registry.py)
        for k, x in obj.items():
            if isinstance(k, str):
                _frames(x, (*path, ("key", k)), out, depth + 1)


def _put(obj: Any, path: Path, df: pl.DataFrame) -> Any:
    """``obj`` with the frame at ``path`` replaced by ``df`` (tuples rebuilt, dataclasses set)."""
    if not path:
        return df
    key, rest = path[0], path[1:]
    if isinstance(key, tuple):  # a dict's key
        obj[key[1]] = _put(obj[key[1]], rest, df)
        return obj
    if isinstance(key, int):
        items = list(obj)
        items[key] = _put(items[key], rest, df)
        return tuple(items) if isinstance(obj, tuple) else items
    value = _put(getattr(obj, key), rest, df)
    try:
        setattr(obj, key, value)
    except dataclasses.FrozenInstanceError:
        return dataclasses.replace(obj, **{key: value})
    return obj


def compact_batch(parts: list[Any], empties: dict[Any, pl.DataFrame] | None = None) -> list[Any]:
    """``parts`` (a batch as gathered) with their frames sharing one concatenated frame per place
    and schema; frames alone of their kind in the batch are left as they are. Frames without rows
    become one shared empty frame per place and schema (kept in ``empties`` from batch to batch,
    when given): ~8 kB each otherwise, and a part has several (its rank rows, when the workers
    wrote them: ``engine/spill.py``)."""
    found = []
    for p in parts:
        f: dict[Path, pl.DataFrame] = {}
        _frames(p, (), f)
        found.append(f)
    places: dict[tuple[Path, tuple[tuple[str, pl.DataType], ...]], list[int]] = {}
    out = list(parts)
    empties = {} if empties is None else empties
    for i, f in enumerate(found):
        for path, df in f.items():
            key = (path, tuple(df.schema.items()))
            if df.height:
                places.setdefault(key, []).append(i)
            else:
                out[i] = _put(out[i], path, empties.setdefault(key, df))
    for (path, _schema), idx in places.items():
        if len(idx) < 2:
            continue
        frames = [found[i][path] for i in idx]
        whole = pl.concat(frames, how="vertical", rechunk=True)
        off = 0
        for i, df in zip(idx, frames, strict=True):
            out[i] = _put(out[i], path, whole.slice(off, df.height))
            off += df.height
    return out
