"""The columns of a Kineto profile's complete events, built batch by batch.

Each batch of framed events (a JSON list) is decoded in C straight into column buffers
(:mod:`~charllm_trace.converters.kineto_native`) where C is certain of it, and by msgspec otherwise
(or when the compiled module is missing): msgspec decodes the events into small typed structs
holding only the fields used, and the comm-related args stay raw, decoded only for the few events
that may be communication; ``ts`` and ``dur`` stay raw too and become nanoseconds exactly from their
decimal text (:mod:`~charllm_trace.converters.kineto_times`). Both paths give the same columns.
"""

from __future__ import annotations

import operator
import os
import re
from itertools import compress
from typing import Any

import msgspec
import numpy as np
import polars as pl

from charllm_trace.converters import kineto_native
from charllm_trace.converters.kineto_devices import ProcessNames, mark_device_activity
from charllm_trace.converters.kineto_native import INT_COLUMNS
from charllm_trace.converters.kineto_profile import (
    CATEGORY_KIND,
    COMM_ARG_KEYS,
    SHAPE_ARG_KEYS,
    SHAPE_OP_RE,
    SKIP_CATEGORIES,
    SYNC_ARG_KEYS,
    SYNC_CATEGORY,
    KinetoProfile,
    base_time_ns,
    check_times,
    checked_ints,
    gpu_columns,
    make_profile,
)
from charllm_trace.converters.kineto_times import strict_text_us_to_ns
from charllm_trace.converters.kineto_vocab import COMM_HINT, Vocab, comm_hits
from charllm_trace.core.alloc import trim_heap
from charllm_trace.core.errors import InputError

_COMM_FIELDS = {f"c{i}": key for i, key in enumerate(COMM_ARG_KEYS)}
_COMM_ITEMS = tuple(_COMM_FIELDS.items())
_SYNC_FIELDS = {f"s{i}": key for i, key in enumerate(SYNC_ARG_KEYS)}
#: the shape args among the comm args: the same raw fields of ``_Args`` (c<i>), by key
_SHAPE_FIELDS = {f: key for f, key in _COMM_FIELDS.items() if key in SHAPE_ARG_KEYS}
_shape_raws = operator.attrgetter(*_SHAPE_FIELDS)  # a struct's raw shape args, as a tuple


# the comm args as raw JSON fields c0..cN (declared dynamically: one per key in COMM_ARG_KEYS)
_Args = msgspec.defstruct(  # type: ignore[misc]
    "_Args",
    [
        ("correlation", Any, None),
        ("external_id", Any, None),
        ("rf_id", Any, None),
        ("device", Any, None),
        ("stream", Any, None),
    ]
    + [(f, Any, None) for f in _SYNC_FIELDS]
    + [(f, msgspec.Raw, msgspec.Raw()) for f in _COMM_FIELDS],
    gc=False,
    rename={"external_id": "External id", "rf_id": "Record function id", **_SYNC_FIELDS, **_COMM_FIELDS},
)


#: the fields of an event kept (``ph`` aside)
_EVENT_FIELDS = [
    ("cat", Any, None),
    ("name", Any, None),
    ("pid", Any, None),
    ("tid", Any, None),
    ("ts", msgspec.Raw, msgspec.Raw()),
    ("dur", msgspec.Raw, msgspec.Raw()),
    ("args", _Args | None, None),
]
_Event = msgspec.defstruct("_Event", [("ph", Any, None), *_EVENT_FIELDS], gc=False)  # type: ignore[misc]


# Fast decode: events tagged by ``ph``; only complete events ("X") keep fields, every other phase
# is skipped without building Python objects. A batch with anything else (an unlisted phase, an
# event without ``ph``, a non-string ``ph``) is decoded again with the general ``_Event``.
_PHASES = (
    "B",
    "E",
    "i",
    "I",
    "C",
    "b",
    "n",
    "e",
    "s",
    "t",
    "f",
    "P",
    "O",
    "N",
    "D",
    "M",
    "R",
    "T",
    "p",
    "S",
    "F",
)
_XEvent = msgspec.defstruct("_XEvent", _EVENT_FIELDS, gc=False, tag_field="ph", tag="X")  # type: ignore[misc]
_FAST_EVENT: Any = _XEvent
_SKIP: dict[str, Any] = {}
for _ph in _PHASES:
    _SKIP[_ph] = msgspec.defstruct(f"_Skip{ord(_ph)}", [], gc=False, tag_field="ph", tag=_ph)
    _FAST_EVENT = _FAST_EVENT | _SKIP[_ph]
_SKIP_META = _SKIP["M"]


class Top(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815 - the JSON key
    nodes: msgspec.Raw = msgspec.Raw()
    schema: Any = None
    baseTimeNanoseconds: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    host_name: Any = None


_SKIP_SPELLINGS = frozenset({"Trace", "trace"})


_NO_ARGS = _Args()

# The args of the few rows the native path decodes (comm candidates, cuda_sync): the comm args
# decoded as values at once (what ``_comm_dict`` gets from their raw JSON), UNSET when absent
# (``to_builtins`` leaves those out).
_CommValues = msgspec.defstruct(  # type: ignore[misc]
    "_CommValues",
    [(f, Any, msgspec.UNSET) for f in _COMM_FIELDS],
    gc=False,
    rename=_COMM_FIELDS,
)
#: The shape args of the rows ``keeps_shapes`` accepts, as raw JSON (decoded once per distinct text).
_ShapeRaw = msgspec.defstruct(  # type: ignore[misc]
    "_ShapeRaw",
    [(f, msgspec.Raw, msgspec.Raw()) for f in _SHAPE_FIELDS],
    gc=False,
    rename=_SHAPE_FIELDS,
)
_SyncValues = msgspec.defstruct(  # type: ignore[misc]
    "_SyncValues", [(f, Any, None) for f in _SYNC_FIELDS], gc=False, rename=_SYNC_FIELDS
)
_get = {
    k: operator.attrgetter(k)
    for k in (
        "name",
        "cat",
        "pid",
        "tid",
        "ts",
        "dur",
        "args",
        "device",
        "stream",
        "correlation",
        "external_id",
        "rf_id",
    )
}


def _us_col(path: str | os.PathLike[str], xs: list[Any], key: str) -> np.ndarray:
    """``ts`` or ``dur`` (raw JSON text) of every complete event of a batch as exact nanoseconds."""
    return strict_text_us_to_ns(path, list(map(_get[key], xs)), key, lambda i: xs[i].name)


def decode_top(raw: bytes, path: str | os.PathLike[str]) -> Top:
    try:
        return msgspec.json.decode(raw, type=Top)
    except UnicodeDecodeError as exc:
        raise InputError(path, f"invalid UTF-8 in the profile ({exc.reason})") from None
    except RecursionError:
        raise InputError(path, "JSON nested too deeply") from None
    except msgspec.ValidationError as exc:
        msg = str(exc).split("\n")[0]
        if "Expected `object`" in msg:
            raise InputError(path, "JSON is not an object (expected a Kineto profile or host ET)") from None
        raise InputError(path, f"unexpected Kineto profile layout: {msg}") from None
    except msgspec.DecodeError as exc:
        raise InputError(
            path, f"not valid JSON (truncated or corrupt?): {str(exc).splitlines()[0]}"
        ) from None


class Columns:
    """The columns of the X events, batch by batch: decoded in C (``kineto_native``) where it can,
    by msgspec otherwise (a batch C is not certain of, or no compiled module)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.dec = msgspec.json.Decoder(list[_Event])
        self.fast = msgspec.json.Decoder(list[_FAST_EVENT])
        self.comm_list_dec = msgspec.json.Decoder(list[_CommValues])
        self.shape_list_dec = msgspec.json.Decoder(list[_ShapeRaw])
        self.shape_values: dict[
            tuple[bytes, ...], dict[str, Any]
        ] = {}  # a row's raw shape args -> their dict
        self.sync_list_dec = msgspec.json.Decoder(list[_SyncValues])
        self.comm_pairs: dict[int, bool] = {}  # (name code << 32 | category code) -> may be comm
        self.name_parts: list[np.ndarray] = []  # vocabulary codes
        self.cat_parts: list[np.ndarray] = []
        self.int_parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {k: [] for k in INT_COLUMNS}
        self.ts_parts: list[np.ndarray] = []
        self.dur_parts: list[np.ndarray] = []
        self.comm_args: dict[int, dict[str, Any]] = {}
        self.row0 = 0
        self.n_raw = 0
        self.names = Vocab(COMM_HINT)
        self.shape_re = re.compile(SHAPE_OP_RE)
        self.shape_flags = np.zeros(0, dtype=bool)  # name code -> SHAPE_OP_RE matches it
        self.cpu_cats = np.zeros(0, dtype=bool)  # category code -> a cpu_op category
        self.cats = Vocab(lower=True)
        self.native = kineto_native.decoder()
        self.procs = ProcessNames(("X", *_PHASES))  # process names and labels (metadata events)
        # C codes -> vocabulary codes
        self.name_map = np.zeros(0, dtype=np.uint32)
        self.cat_map = np.zeros(0, dtype=np.uint32)

    def close(self) -> None:
        if self.native is not None:
            self.native.close()
            self.native = None

    def add(self, data: Any, count: int | None = None) -> int:
        """Decode one JSON list of at most ``count`` events (bytes or a buffer); returns how many
        events it held."""
        if self.native is not None and count is not None:
            batch = self.native.decode(data, count)
            if batch is not None:
                self.n_raw += batch.n_raw
                if batch.meta is not None:
                    self.procs.add_batch(batch.meta)
                self._add_native(batch, data)
                return batch.n_raw
        return self.add_msgspec(data)

    def _skip_mask(self, cat_codes: np.ndarray) -> np.ndarray | None:
        """Rows to keep when odd spellings of "Trace" ("TRACE") are among the categories, else None."""
        skip = [self.cats.codes[c] for c in SKIP_CATEGORIES if c in self.cats.codes]
        if skip and np.isin(cat_codes, skip).any():
            return ~np.isin(cat_codes, skip)
        return None

    def _add_native(self, b: kineto_native.Batch, data: Any) -> None:
        if b.new_names:
            self.name_map = np.concatenate([self.name_map, self.names.encode(b.new_names)])
        if b.new_cats:
            self.cat_map = np.concatenate([self.cat_map, self.cats.encode(b.new_cats)])
        name_codes = self.name_map[b.name]
        cat_codes = self.cat_map[b.cat]
        ints, valid, ts, dur, aoff, alen = b.ints, b.valid, b.ts, b.dur, b.args_off, b.args_len
        keep = self._skip_mask(cat_codes)
        if keep is not None:
            name_codes, cat_codes, ts, dur, aoff, alen = (
                x[keep] for x in (name_codes, cat_codes, ts, dur, aoff, alen)
            )
            ints, valid = ints[:, keep], valid[:, keep]
        self.name_parts.append(name_codes)
        self.cat_parts.append(cat_codes)
        for j, key in enumerate(INT_COLUMNS):
            self.int_parts[key].append((ints[j].copy(), valid[j].copy()))  # not views: the batch array goes
        self.ts_parts.append(ts)
        self.dur_parts.append(dur)
        with memoryview(data) as view:

            def spans(rows: list[int]) -> bytes:
                """The args objects of ``rows`` as one JSON list ({} for a row without args)."""
                parts = [
                    b"{}" if o < 0 else bytes(view[o : o + n])
                    for o, n in zip(aoff[rows].tolist(), alen[rows].tolist(), strict=True)
                ]
                return b"[" + b",".join(parts) + b"]"

            rows = self._comm_rows(name_codes, cat_codes).tolist()
            if rows:
                # the comm args present, in COMM_ARG_KEYS order (the struct's fields), as values
                # (what ``msgspec.to_builtins`` gives, at a fifth of its cost)
                unset, fields = msgspec.UNSET, _COMM_ITEMS
                for i, a in zip(rows, self.comm_list_dec.decode(spans(rows)), strict=True):
                    self.comm_args[self.row0 + i] = {
                        k: v for f, k in fields if (v := getattr(a, f)) is not unset
                    }
            rows = self._shape_rows(name_codes, cat_codes).tolist()
            if rows:  # their shape args as raw JSON, each distinct text decoded once
                for i, a in zip(rows, self.shape_list_dec.decode(spans(rows)), strict=True):
                    d = self._shape_dict(a)
                    if d:
                        self.comm_args[self.row0 + i] = d
            sync_code = self.cats.codes.get(SYNC_CATEGORY)
            if sync_code is not None:
                rows = np.flatnonzero((cat_codes == sync_code) & (aoff >= 0)).tolist()
                for i, a in zip(rows, self.sync_list_dec.decode(spans(rows)) if rows else (), strict=True):
                    d = _sync_dict(a)
                    if d:
                        self.comm_args[self.row0 + i] = d
        self.row0 += len(name_codes)

    def _comm_rows(self, name_codes: np.ndarray, cat_codes: np.ndarray) -> np.ndarray:
        """Rows (of a batch) ``may_be_comm`` accepts: the name pattern was matched once per distinct
        name; the exact test once per distinct (name, category) among those rows."""
        pre = np.flatnonzero(self.names.flags[name_codes])
        if not pre.size:
            return pre
        pairs = (name_codes[pre].astype(np.int64) << 32) | cat_codes[pre].astype(np.int64)
        uniq, inverse = np.unique(pairs, return_inverse=True)
        new = [int(u) for u in uniq.tolist() if u not in self.comm_pairs]
        if new:
            nc = np.array([u >> 32 for u in new], dtype=np.uint32)
            cc = np.array([u & 0xFFFFFFFF for u in new], dtype=np.uint32)
            hit = np.zeros(len(new), dtype=bool)
            hit[comm_hits(self.names.value_series(nc), self.cats.value_series(cc)).to_numpy()] = True
            self.comm_pairs.update(zip(new, hit.tolist(), strict=True))
        ok = np.array([self.comm_pairs[u] for u in uniq.tolist()], dtype=bool)
        return pre[ok[inverse]]

    def _shape_rows(self, name_codes: np.ndarray, cat_codes: np.ndarray) -> np.ndarray:
        """Rows (of a batch) that ``keeps_shapes`` accepts: the name pattern matched once per distinct
        name, the category once per distinct category."""
        names, cats = self.names.values, self.cats.values
        if len(self.shape_flags) < len(names):
            new = [self.shape_re.match(v) is not None for v in names[len(self.shape_flags) :]]
            self.shape_flags = np.concatenate([self.shape_flags, np.array(new, dtype=bool)])
        rows = np.flatnonzero(self.shape_flags[name_codes])
        if not rows.size:
            return rows
        if len(self.cpu_cats) < len(cats):
            self.cpu_cats = np.array(
                [CATEGORY_KIND.get(c, ("other", False))[0] == "cpu_op" for c in cats], bool
            )
        return rows[self.cpu_cats[cat_codes[rows]]]

    def _shape_dict(self, a: Any) -> dict[str, Any]:
        """The shape args (``SHAPE_ARG_KEYS``) of one decoded struct with their raw JSON (a ``_ShapeRaw``,
        or an ``_Args`` of the msgspec reader). Layers and steps repeat the same shapes: each distinct
        (dims, types, values) text is decoded once, and its rows share one dict (read only)."""
        raws = _shape_raws(a)
        key = tuple(map(bytes, raws))
        d = self.shape_values.get(key)
        if d is None:
            d = self.shape_values[key] = {
                k: msgspec.json.decode(r) for k, r in zip(_SHAPE_FIELDS.values(), raws, strict=True) if len(r)
            }
        return d

    def add_msgspec(self, data: Any) -> int:
        n_raw, xs = self._decode_events(data)
        self.n_raw += n_raw
        name_codes = self.names.encode(list(map(_get["name"], xs)))
        cat_codes = self.cats.encode(list(map(_get["cat"], xs)))
        keep = self._skip_mask(cat_codes)
        if keep is not None:
            xs = list(compress(xs, keep.tolist()))
            name_codes, cat_codes = name_codes[keep], cat_codes[keep]
        self.name_parts.append(name_codes)
        self.cat_parts.append(cat_codes)
        args = list(map(_get["args"], xs))
        if None in args:
            args = [_NO_ARGS if a is None else a for a in args]
        for key in INT_COLUMNS:
            owner = xs if key in ("pid", "tid") else args
            s = _int_series(list(map(_get[key], owner)), self.path, key)
            self.int_parts[key].append((s.fill_null(0).to_numpy(), s.is_not_null().to_numpy()))
        self.ts_parts.append(_us_col(self.path, xs, "ts"))
        self.dur_parts.append(_us_col(self.path, xs, "dur"))
        self._keep_args(name_codes, cat_codes, args)
        self.row0 += len(xs)
        del xs, args  # the comm args' Raw values may be views of ``data``: gone now
        return n_raw

    def _decode_events(self, data: Any) -> tuple[int, list[Any]]:
        """(events in the batch, its complete events outside the skipped categories): decoded by
        the fast decoder, else (a batch it refuses) by the general one, whose errors name the
        problem."""
        path = self.path
        try:
            evs = self.fast.decode(data)
            if any(e.__class__ is _SKIP_META for e in evs):
                self.procs.add_batch(data)
            return len(evs), [
                e
                for e in evs
                if e.__class__ is _XEvent and not (type(e.cat) is str and e.cat in _SKIP_SPELLINGS)
            ]
        except UnicodeDecodeError as exc:
            raise InputError(path, f"invalid UTF-8 in traceEvents ({exc.reason})") from None
        except RecursionError:
            raise InputError(path, "JSON nested too deeply in traceEvents") from None
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        evs = self._decode_general(data)
        if any(e.ph == "M" for e in evs):
            self.procs.add_batch(data)
        return len(evs), [
            e for e in evs if e.ph == "X" and not (type(e.cat) is str and e.cat in _SKIP_SPELLINGS)
        ]

    def _decode_general(self, data: Any) -> list[Any]:
        path = self.path
        try:
            return self.dec.decode(data)
        except (UnicodeDecodeError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else "invalid UTF-8"
            raise InputError(path, f"{why} in traceEvents") from None
        except msgspec.ValidationError as exc:
            raise InputError(path, f"malformed Kineto event: {str(exc).splitlines()[0]}") from None
        except msgspec.DecodeError as exc:  # offsets in the message would be within the batch
            msg = re.sub(r" \(byte \d+\)$", "", str(exc).splitlines()[0])
            raise InputError(path, f"not valid JSON (truncated or corrupt?): {msg} in traceEvents") from None

    def _keep_args(self, name_codes: np.ndarray, cat_codes: np.ndarray, args: list[Any]) -> None:
        """The args kept by row: communication ops', shape-carrying ops' and sync events'."""
        for i in self._comm_rows(name_codes, cat_codes).tolist():
            self.comm_args[self.row0 + i] = _comm_dict(args[i])
        for i in self._shape_rows(name_codes, cat_codes).tolist():
            a = args[i]
            d = self._shape_dict(a) if a is not _NO_ARGS else {}
            if d:
                self.comm_args[self.row0 + i] = d
        sync_code = self.cats.codes.get(SYNC_CATEGORY)
        if sync_code is not None:
            for i in np.flatnonzero(cat_codes == sync_code).tolist():
                d = _sync_dict(args[i])
                if d:
                    self.comm_args[self.row0 + i] = d

    def finish(self, top: Top) -> KinetoProfile:
        base_ns = base_time_ns(self.path, top.baseTimeNanoseconds)
        self.close()

        def int_col(key: str) -> pl.Series:
            # one contiguous column at a time, the batch parts freed as it goes
            parts = self.int_parts.pop(key)
            if not parts:
                return pl.Series([], dtype=pl.Int64)
            vals = np.concatenate([v for v, _ in parts])
            valid = np.concatenate([m for _, m in parts])
            parts.clear()
            if valid.all():
                return pl.Series(vals, dtype=pl.Int64)
            return pl.Series(np.ma.masked_array(vals, mask=~valid), dtype=pl.Int64)  # masked: null

        cat_codes = np.concatenate(self.cat_parts) if self.cat_parts else np.zeros(0, np.uint32)
        self.cat_parts.clear()
        n = len(cat_codes)
        codes = pl.Series(cat_codes, dtype=pl.UInt32)
        del cat_codes
        # kind and on_gpu once per distinct category, gathered by row
        kind_gpu = [CATEGORY_KIND.get(v, ("other", False)) for v in self.cats.values]
        ts = np.concatenate(self.ts_parts) if self.ts_parts else np.zeros(0, dtype=np.int64)
        dur = np.concatenate(self.dur_parts) if self.dur_parts else np.zeros(0, dtype=np.int64)
        self.ts_parts = self.dur_parts = []
        check_times(self.path, ts, dur, base_ns)
        ints = {key: int_col(key) for key in INT_COLUMNS}
        ints["device"] = ints["device"].cast(pl.Int32)
        ts += base_ns
        name_codes = np.concatenate(self.name_parts) if self.name_parts else np.zeros(0, np.uint32)
        self.name_parts.clear()
        # the batches' parts are all freed now, before the string columns are made: their pages
        # go back instead of adding to the read's peak
        trim_heap()
        events = pl.DataFrame(
            {
                "row": pl.Series(np.arange(n, dtype=np.int64)),
                "name": self.names.decode([name_codes]),
                "cat": pl.Series(self.cats.values, dtype=pl.String).gather(codes),
                "kind": pl.Series([k for k, _ in kind_gpu], dtype=pl.String).gather(codes),
                "on_gpu": pl.Series([g for _, g in kind_gpu], dtype=pl.Boolean).gather(codes),
                "pid": ints["pid"],
                "tid": ints["tid"],
                "device": ints["device"],
                "stream": ints["stream"],
                "start_ns": pl.Series(ts, dtype=pl.Int64),
                "dur_ns": pl.Series(dur, dtype=pl.Int64),
                "correlation": ints["correlation"],
                "external_id": ints["external_id"],
                "rf_id": ints["rf_id"],
            }
        )
        device_pids = self.procs.device_pids()
        events = gpu_columns(mark_device_activity(events, device_pids), self.path)
        doc_meta = {
            "distributedInfo": top.distributedInfo,
            "deviceProperties": top.deviceProperties,
            "host_name": top.host_name,
            "schemaVersion": top.schemaVersion,
            "traceName": top.traceName,
        }
        prof = make_profile(self.path, events, self.comm_args, base_ns, doc_meta, self.n_raw)
        prof.device_labels = device_pids
        return prof


def _comm_dict(a: Any) -> dict[str, Any]:
    """The comm args (COMM_ARG_KEYS) of one decoded args struct, decoded from their raw JSON."""
    d = {}
    if a is not _NO_ARGS:
        for f, key in _COMM_FIELDS.items():
            v = getattr(a, f)
            if len(v):
                d[key] = msgspec.json.decode(v)
    return d


def _sync_dict(a: Any) -> dict[str, Any]:
    """The SYNC_ARG_KEYS of one decoded args struct (those that are not null)."""
    return {key: v for f, key in _SYNC_FIELDS.items() if (v := getattr(a, f)) is not None}


def _int_series(values: list[Any], path: str | os.PathLike[str] = "", key: str = "") -> pl.Series:
    try:
        return pl.Series(values, dtype=pl.Int64, strict=True)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series(checked_ints(path, key, values), dtype=pl.Int64)
