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

import bisect
import copy
import dataclasses
import io
import pickle
from array import array
from collections.abc import Container, Iterator, Mapping, Sequence
from typing import Any, overload

import polars as pl

from charllm_trace.analysis.registry import FramePath, frame_at
from charllm_trace.engine.shelf import Ref, Shelf

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


_Places = dict[tuple[Path, tuple[tuple[str, pl.DataType], ...]], list[int]]


def _group(
    parts: list[Any], empties: dict[Any, pl.DataFrame]
) -> tuple[list[dict[Path, pl.DataFrame]], _Places, list[Any]]:
    """Each part's frames by place; the parts (by index) that hold rows at each place and schema;
    the parts with their empty frames replaced by the one kept in ``empties``."""
    found = []
    for p in parts:
        f: dict[Path, pl.DataFrame] = {}
        _frames(p, (), f)
        found.append(f)
    places: _Places = {}
    out = list(parts)
    for i, f in enumerate(found):
        for path, df in f.items():
            key = (path, tuple(df.schema.items()))
            if df.height:
                places.setdefault(key, []).append(i)
            else:
                out[i] = _put(out[i], path, empties.setdefault(key, df))
    return found, places, out


def compact_batch(parts: list[Any], empties: dict[Any, pl.DataFrame] | None = None) -> list[Any]:
    """``parts`` (a batch as gathered) with their frames sharing one concatenated frame per place
    and schema; frames alone of their kind in the batch are left as they are. Frames without rows
    become one shared empty frame per place and schema (kept in ``empties`` from batch to batch,
    when given): ~8 kB each otherwise, and a part has several (its rank rows, when the workers
    wrote them: ``engine/spill.py``)."""
    found, places, out = _group(parts, {} if empties is None else empties)
    for path, whole, spans in _joined(found, places):
        for i, off, height in spans:
            out[i] = _put(out[i], path, whole.slice(off, height))
    return out


def _joined(
    found: list[dict[Path, pl.DataFrame]], places: _Places
) -> Iterator[tuple[Path, pl.DataFrame, list[tuple[int, int, int]]]]:
    """For each place and schema held by two parts or more (one alone is left as it is): the
    place, its frames concatenated in part order, and (part index, offset, rows) of each."""
    for (path, _schema), idx in places.items():
        if len(idx) < 2:
            continue
        frames = [found[i][path] for i in idx]
        offsets = [0]
        for df in frames[:-1]:
            offsets.append(offsets[-1] + df.height)
        spans = [(i, off, df.height) for i, off, df in zip(idx, offsets, frames, strict=True)]
        yield path, pl.concat(frames, how="vertical", rechunk=True), spans


class _Ref:
    """Where a held part's frame is: rows ``offset`` to ``offset + height`` of ``HeldParts.held[frame]``."""

    __slots__ = ("frame", "height", "offset")

    def __init__(self, frame: int, offset: int, height: int) -> None:
        self.frame, self.offset, self.height = frame, offset, height


class _Pickler(pickle.Pickler):
    """Pickles a batch's skeletons, the shared empty frames (``HeldParts.empties``) named by
    their index: unpickled, every part points at the one frame again (~8 kB each otherwise)."""

    def __init__(self, buf: io.BytesIO, ids: dict[int, int]) -> None:
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL)
        self.ids = ids

    def persistent_id(self, obj: Any) -> int | None:  # noqa: D102 - pickle's hook
        return self.ids.get(id(obj)) if isinstance(obj, pl.DataFrame) else None


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, shared: list[pl.DataFrame]) -> None:
        super().__init__(io.BytesIO(data))
        self.shared = shared

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle's hook
        return self.shared[pid]


class _Frames:
    """The batches' concatenated frames on the shelf (Arrow IPC), read back on access; the
    last few read are kept."""

    KEEP = 16

    def __init__(self, shelf: Shelf) -> None:
        self.shelf = shelf
        self.refs: list[tuple[int, int]] = []
        self.cache: dict[int, pl.DataFrame] = {}

    def append(self, df: pl.DataFrame) -> None:
        buf = io.BytesIO()
        df.write_ipc(buf, compression="uncompressed")
        self.refs.append(self.shelf.put(buf.getvalue()))

    def __len__(self) -> int:
        return len(self.refs)

    def __getitem__(self, k: int) -> pl.DataFrame:
        """The ``k``-th frame appended (what a :class:`_Ref` names)."""
        df = self.cache.get(k)
        if df is None:
            df = pl.read_ipc(io.BytesIO(self.shelf.get(self.refs[k])))
            if len(self.cache) >= self.KEEP:
                del self.cache[next(iter(self.cache))]
            self.cache[k] = df
        return df


class HeldParts(Sequence[Any]):
    """The ranks' parts as the driver holds them until the merge (issue 26 item 3: a driver that
    does not grow with ranks): what :func:`compact_batch` gives, but each rank's frames are held as
    a reference (:class:`_Ref`: 3 integers) into the batch's concatenated frame, not as a frame
    slice (~3 kB each, a dozen per part), and both the batch's frames and its parts with their
    references (the skeletons) wait on this process's disk (:class:`Shelf`), not in its memory:
    read back a batch at a time. Read, a part is rebuilt: its fields as they arrived, its
    per-analysis parts (``RankPart.parts``) a mapping that gives each entry with its frames sliced
    back on each access (:class:`_Entries`): a merge that reads one analysis' entries holds those
    slices, not every rank's every frame. The frames read are those :func:`compact_batch` would
    have held: the same rows in the same slices of one frame per batch, place and schema."""

    def __init__(self, empties: dict[Any, pl.DataFrame] | None = None) -> None:
        self.shelf = Shelf()
        self.held = _Frames(self.shelf)  # one concatenated frame per batch, place and schema
        # per batch: the parts without their entries (and their fields holding refs), and each
        # analysis' entries (None where a part has none), each pickled on its own on the shelf
        self.batches: list[tuple[Ref, dict[str, Ref], int]] = []
        self.starts: list[int] = []  # the first part's index of each batch
        self.ranks = array("q")  # each part's rank, and whether it has no timestamps
        self.no_ts = bytearray()
        self.empties = {} if empties is None else empties
        self.shared: list[pl.DataFrame] = []  # the empties as numbered in the pickles
        self.ids: dict[int, int] = {}

    def close(self) -> None:
        """Remove the shelf's file (also removed when the process ends)."""
        self.shelf.close()

    def add(self, parts: list[Any]) -> None:
        """Hold a gathered batch (:func:`compact_batch`'s places and schemas)."""
        found, places, out = _group(parts, self.empties)
        fields: list[set[str]] = [set() for _ in parts]
        for path, whole, spans in _joined(found, places):
            k = len(self.held)
            self.held.append(whole)
            for i, off, height in spans:
                out[i] = _put(out[i], path, _Ref(k, off, height))
                fields[i].add(str(path[0]))
        for df in self.empties.values():
            if id(df) not in self.ids:
                self.ids[id(df)] = len(self.shared)
                self.shared.append(df)
        names = list(dict.fromkeys(n for p in out for n in p.parts))
        entries = {n: self._put([p.parts.get(n) for p in out]) for n in names}
        bases = []
        for p, f in zip(out, fields, strict=True):
            base = copy.copy(p)
            object.__setattr__(base, "parts", {n: None for n in p.parts})  # the names, in order
            bases.append((base, frozenset(f)))
            self.ranks.append(p.rank)
            self.no_ts.append(bool(p.no_ts))
        self.starts.append(len(self.ranks) - len(parts))
        self.batches.append((self._put(bases), entries, len(parts)))

    def _put(self, obj: Any) -> Ref:
        buf = io.BytesIO()
        _Pickler(buf, self.ids).dump(obj)
        return self.shelf.put(buf.getvalue())

    def _get(self, ref: Ref) -> Any:
        return _Unpickler(self.shelf.get(ref), self.shared).load()

    def _entries(self, b: int, name: str) -> list[Any]:
        """The ``name`` entries of batch ``b``'s parts as held (None where a part has none)."""
        ref = self.batches[b][1].get(name)
        return [None] * self.batches[b][2] if ref is None else self._get(ref)  # type: ignore[no-any-return]

    def _batch(self, b: int) -> list[tuple[Any, frozenset[str]]]:
        """Batch ``b``'s parts as held, their entries put back."""
        bases: list[tuple[Any, frozenset[str]]] = self._get(self.batches[b][0])
        for name in self.batches[b][1]:
            for (base, _), e in zip(bases, self._entries(b, name), strict=True):
                if name in base.parts:
                    base.parts[name] = e
        return bases

    def skeletons(self) -> Iterator[tuple[Any, frozenset[str]]]:
        """Every held part as held (its frames :class:`_Ref` s) with its fields that hold
        references, in order, a batch read at a time."""
        for b in range(len(self.batches)):
            yield from self._batch(b)

    def __len__(self) -> int:
        return len(self.ranks)

    def _each(self, name: str) -> Iterator[tuple[int, Any]]:
        """(index, entry) of every held part's ``name`` entry, None where it has none: only that
        analysis' entries are read back, a batch at a time."""
        for b, start in enumerate(self.starts):
            yield from enumerate(self._entries(b, name), start=start)

    def entries(self, name: str) -> list[tuple[int, Any]]:
        """(rank, part) of every held part's ``name`` entry that is not None, as held: frames
        that share a batch's frame are :class:`_Ref` s (``Merge.entries``)."""
        return [(self.ranks[i], e) for i, e in self._each(name) if e is not None]

    def timed(self, name: str) -> list[tuple[int, Any]]:
        """``Merge.timed`` of the held parts (each ``name`` entry as held, or None)."""
        return [(self.ranks[i], e) for i, e in self._each(name) if not self.no_ts[i]]

    def frames(self, name: str, path: FramePath, ranks: Container[int] | None = None) -> list[pl.DataFrame]:
        """``Merge.frames`` of the held parts: the frames at ``path`` of every ``name`` entry in
        rank order, the references that follow one another in one held frame joined into one
        slice. Frames without rows are left out unless every one is empty (then the first)."""
        pieces: list[pl.DataFrame] = []
        empty: pl.DataFrame | None = None
        run: list[int] | None = None  # [frame, start, end] of the slice being joined

        def close() -> None:
            if run is not None:
                pieces.append(self.held[run[0]].slice(run[1], run[2] - run[1]))

        for i, e in self._each(name):  # read a batch at a time, not every entry at once
            if e is None or (ranks is not None and self.ranks[i] not in ranks):
                continue
            leaf = frame_at(e, path)
            if isinstance(leaf, _Ref):
                if run is not None and run[0] == leaf.frame and run[2] == leaf.offset:
                    run[2] += leaf.height
                    continue
                close()
                run = [leaf.frame, leaf.offset, leaf.offset + leaf.height]
            elif isinstance(leaf, pl.DataFrame):
                if leaf.height == 0:
                    empty = leaf if empty is None else empty
                    continue
                close()
                run = None
                pieces.append(leaf)
        close()
        return pieces if pieces or empty is None else [empty]

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        b = bisect.bisect_right(self.starts, i) - 1
        return self._part(*self._batch(b)[i - self.starts[b]])

    def __iter__(self) -> Iterator[Any]:
        for s in self.skeletons():
            yield self._part(*s)

    def _part(self, skel: Any, fields: frozenset[str]) -> Any:
        if not fields:
            return skel
        p = copy.copy(skel)
        for name in fields:
            v = getattr(skel, name)
            built = _Entries(v, self.held) if isinstance(v, dict) else _build(v, self.held)
            object.__setattr__(p, name, built)
        return p


class _Entries(Mapping[str, Any]):
    """A held part's per-analysis parts: each entry rebuilt with its frames on access."""

    __slots__ = ("frames", "skel")

    def __init__(self, skel: dict[str, Any], frames: _Frames) -> None:
        self.skel, self.frames = skel, frames

    def __getitem__(self, k: str) -> Any:
        return _build(self.skel[k], self.frames)

    def __iter__(self) -> Iterator[str]:
        return iter(self.skel)

    def __len__(self) -> int:
        return len(self.skel)

    def __contains__(self, k: object) -> bool:
        return k in self.skel


def _build(obj: Any, frames: _Frames, depth: int = 0) -> Any:
    """``obj`` with its :class:`_Ref` s replaced by their slices (containers rebuilt as
    :func:`_put` leaves them; an object without refs is returned as it is)."""
    if isinstance(obj, _Ref):
        return frames[obj.frame].slice(obj.offset, obj.height)
    if depth > 4 or isinstance(obj, pl.DataFrame | str | int | float | type(None)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changed = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            b = _build(v, frames, depth + 1)
            if b is not v:
                changed[f.name] = b
        if not changed:
            return obj
        c = copy.copy(obj)
        for k, v in changed.items():
            object.__setattr__(c, k, v)
        return c
    if isinstance(obj, tuple | list):
        items = [_build(x, frames, depth + 1) for x in obj]
        if all(a is b for a, b in zip(items, obj, strict=True)):
            return obj
        return tuple(items) if isinstance(obj, tuple) else items
    if isinstance(obj, dict):
        d = {k: _build(x, frames, depth + 1) if isinstance(k, str) else x for k, x in obj.items()}
        return obj if all(d[k] is obj[k] for k in obj) else d
    return obj
