"""Parse a Kineto (PyTorch profiler) trace into a columnar event table.

Only complete events (``ph == "X"``) become nodes; flow arrows (``s``/``f``),
instant events, metadata (``M``) and the profiler's own ``Trace`` span are not
nodes. Times: Kineto ``ts``/``dur`` are microseconds (floats with three decimals
in recent profiles, i.e. nanosecond precision). ``ts`` is relative to
``baseTimeNanoseconds`` when the profile has that field, otherwise absolute Unix
microseconds. We convert both to integer Unix-epoch nanoseconds without going
through a float product (integer part x 1000 + rounded fraction), so the three
decimals survive exactly.
"""

from __future__ import annotations

import ast
import operator
import os
import re
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

import msgspec
import numpy as np
import polars as pl

from charllm_trace.converters import kineto_native
from charllm_trace.converters._io import is_host_et, is_kineto
from charllm_trace.converters.kineto_native import INT_COLUMNS
from charllm_trace.errors import InputError

#: Kineto category (lower-cased) -> (kind, on_gpu). Categories not listed become kind "other" (CPU).
CATEGORY_KIND: dict[str, tuple[str, bool]] = {
    "cpu_op": ("cpu_op", False),
    "operator": ("cpu_op", False),  # old Kineto
    "python_function": ("cpu_op", False),
    "user_annotation": ("annotation", False),
    "cuda_runtime": ("runtime", False),
    "cuda_driver": ("runtime", False),
    "runtime": ("runtime", False),  # old Kineto
    "hip_runtime": ("runtime", False),
    "kernel": ("kernel", True),
    "gpu_memcpy": ("memcpy", True),
    "memcpy": ("memcpy", True),
    "gpu_memset": ("memset", True),
    "memset": ("memset", True),
    "gpu_user_annotation": ("gpu_annotation", True),
    # CUPTI synchronisation records: pid = device, tid = stream, args device/stream (-1 for
    # context and event syncs), correlation (of the runtime call that synchronised)
    "cuda_sync": ("sync", True),
}
#: Categories that are not trace content (the profiler's own span).
SKIP_CATEGORIES = {"trace"}

#: Args kept verbatim (as JSON in ``attrs``) for nodes that may be collectives.
COMM_ARG_KEYS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "In msg size",
    "Out msg size",
    "Group size",
    "dtype",
    "In split size",
    "Out split size",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Global rank start",
    "Global rank stride",
    "Seq",
    "seq",
    "Rank",
    "Input Dims",
    "Input type",
    "Concrete Inputs",
)

#: Args of ``cuda_sync`` records kept verbatim (as JSON in ``attrs``): for "Stream Wait Event" and
#: "Event Sync", the stream the waited-on event was recorded on and the correlation id of the
#: ``cudaEventRecord`` call that recorded it (read by :mod:`charllm_trace.graph.cuda_sync`).
SYNC_ARG_KEYS = ("wait_on_stream", "wait_on_cuda_event_record_corr_id")
SYNC_CATEGORY = "cuda_sync"


@dataclass
class KinetoProfile:
    """A parsed Kineto profile: the X events as columns plus the profile-level facts."""

    path: str
    events: pl.DataFrame  # one row per node-worthy X event, see parse_kineto
    # row -> args kept verbatim in ``attrs``: the comm args (COMM_ARG_KEYS) of the rows that may be
    # communication, the SYNC_ARG_KEYS of cuda_sync records
    comm_args: dict[int, dict[str, Any]]
    base_ns: int
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    pg_config: list[dict[str, Any]] = field(default_factory=list)
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    hostname: str | None = None
    schema_version: Any = None
    trace_name: str | None = None
    n_raw_events: int = 0


def us_to_ns(values: list[Any]) -> np.ndarray:
    """Microseconds (ints or floats, None allowed -> 0) to int64 nanoseconds, keeping 3 decimals exactly."""
    a = np.array([0.0 if v is None else v for v in values], dtype=np.float64)
    ip = np.floor(a)
    frac = a - ip  # exact (Sterbenz) for |a| >= 1
    return ip.astype(np.int64) * 1000 + np.rint(frac * 1000.0).astype(np.int64)


def _device_properties(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, list):
        return [d for d in raw if isinstance(d, dict)]
    if isinstance(raw, str):  # some profilers write the Python repr
        try:
            v = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return []
        return [d for d in v if isinstance(d, dict)] if isinstance(v, list) else []
    return []


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return None
    return None


def may_be_comm(name: str, kind: str) -> bool:
    n = name.lower()
    if kind == "kernel":
        return "nccl" in n or "rccl" in n or "msccl" in n
    return (
        n == "record_param_comms"
        or n.startswith("c10d::")
        or n.startswith("nccl:")
        or n.startswith("gloo:")
        or n.startswith("rccl:")
        or n.startswith("mpi:")
        or n.startswith("ucc:")
    )


def parse_kineto(doc: dict[str, Any], path: str | os.PathLike[str]) -> KinetoProfile:
    """Turn a loaded Kineto JSON document into a :class:`KinetoProfile`.

    ``events`` columns: row (i64, index into the table), name, cat, kind, on_gpu, pid, tid,
    device, stream, start_ns, dur_ns, correlation, external_id, rf_id.
    """
    if not is_kineto(doc):
        if is_host_et(doc):
            raise InputError(path, "is a host execution trace, not a Kineto profile")
        raise InputError(path, "not a Kineto profile (no traceEvents list)")
    raw_events = doc["traceEvents"]
    xs = [e for e in raw_events if isinstance(e, dict) and e.get("ph") == "X"]
    cats = [str(e.get("cat") or "").lower() for e in xs]
    keep = [c not in SKIP_CATEGORIES for c in cats]
    if not all(keep):
        xs = [e for e, k in zip(xs, keep, strict=True) if k]
        cats = [c for c, k in zip(cats, keep, strict=True) if k]
    n = len(xs)
    names = [str(e.get("name", "")) for e in xs]
    kinds_gpu = [CATEGORY_KIND.get(c, ("other", False)) for c in cats]
    kinds = [k for k, _ in kinds_gpu]
    on_gpu = [g for _, g in kinds_gpu]
    args = [e.get("args") or {} for e in xs]
    if any(not isinstance(a, dict) for a in args):
        args = [a if isinstance(a, dict) else {} for a in args]
    try:
        ts = us_to_ns([e.get("ts") for e in xs])
        dur = us_to_ns([e.get("dur") for e in xs])
    except (TypeError, ValueError) as exc:
        raise InputError(path, f"Kineto event with a non-numeric ts/dur ({exc})") from None
    base = doc.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0

    def icol(values: list[Any]) -> pl.Series:
        return pl.Series([_int_or_none(v) for v in values], dtype=pl.Int64)

    pids = icol([e.get("pid") for e in xs])
    tids = icol([e.get("tid") for e in xs])
    events = pl.DataFrame(
        {
            "row": pl.Series(np.arange(n, dtype=np.int64)),
            "name": pl.Series(names, dtype=pl.String),
            "cat": pl.Series(cats, dtype=pl.String),
            "kind": pl.Series(kinds, dtype=pl.String),
            "on_gpu": pl.Series(on_gpu, dtype=pl.Boolean),
            "pid": pids,
            "tid": tids,
            "device": icol([a.get("device") for a in args]).cast(pl.Int32),
            "stream": icol([a.get("stream") for a in args]),
            "start_ns": pl.Series(ts + base_ns, dtype=pl.Int64),
            "dur_ns": pl.Series(np.maximum(dur, 0), dtype=pl.Int64),
            "correlation": icol([a.get("correlation") for a in args]),
            "external_id": icol([a.get("External id") for a in args]),
            "rf_id": icol([a.get("Record function id") for a in args]),
        }
    )
    events = _gpu_columns(events)
    comm_args: dict[int, dict[str, Any]] = {}
    for i, (nm, k) in enumerate(zip(names, kinds, strict=True)):
        if (k in ("kernel", "cpu_op", "annotation", "other")) and may_be_comm(nm, k):
            a = args[i]
            comm_args[i] = {key: a[key] for key in COMM_ARG_KEYS if key in a}
        elif cats[i] == SYNC_CATEGORY:
            d = {key: args[i][key] for key in SYNC_ARG_KEYS if args[i].get(key) is not None}
            if d:
                comm_args[i] = d
    return _profile(path, events, comm_args, base_ns, doc, len(raw_events))


def _gpu_columns(events: pl.DataFrame) -> pl.DataFrame:
    """GPU events: device from args, else the pid (Kineto writes the device as pid); stream from tid."""
    return events.with_columns(
        pl.when(pl.col("on_gpu")).then(pl.coalesce("device", pl.col("pid").cast(pl.Int32))).alias("device"),
        pl.when(pl.col("on_gpu")).then(pl.coalesce("stream", "tid")).alias("stream"),
        pl.when(pl.col("on_gpu")).then(None).otherwise(pl.col("tid")).alias("tid"),
    )


def _profile(
    path: str | os.PathLike[str],
    events: pl.DataFrame,
    comm_args: dict[int, dict[str, Any]],
    base_ns: int,
    doc: dict[str, Any],
    n_raw: int,
) -> KinetoProfile:
    dist = doc.get("distributedInfo") or {}
    if not isinstance(dist, dict):
        dist = {}
    pg_config = dist.get("pg_config") or []
    return KinetoProfile(
        path=os.fspath(path),
        events=events,
        comm_args=comm_args,
        base_ns=base_ns,
        rank=_int_or_none(dist.get("rank")),
        world_size=_int_or_none(dist.get("world_size")),
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        pg_config=[p for p in pg_config if isinstance(p, dict)] if isinstance(pg_config, list) else [],
        device_properties=_device_properties(doc.get("deviceProperties")),
        hostname=doc.get("host_name") if isinstance(doc.get("host_name"), str) else None,
        schema_version=doc.get("schemaVersion"),
        trace_name=doc.get("traceName") if isinstance(doc.get("traceName"), str) else None,
        n_raw_events=n_raw,
    )


# ---------------------------------------------------------------------------
# Fast path: msgspec, in batches
# ---------------------------------------------------------------------------
# orjson turns a profile into one Python dict per event (about 1.5 KB each); msgspec decodes the
# top level with every event left as a raw slice of the input, then decodes the events in
# batches into small typed structs, keeping only the fields we use. The comm-related args stay
# raw and are decoded only for the few events that may be communication.

_COMM_FIELDS = {f"c{i}": key for i, key in enumerate(COMM_ARG_KEYS)}
_SYNC_FIELDS = {f"s{i}": key for i, key in enumerate(SYNC_ARG_KEYS)}


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


_Event = msgspec.defstruct(  # type: ignore[misc]
    "_Event",
    [
        ("ph", Any, None),
        ("cat", Any, None),
        ("name", Any, None),
        ("pid", Any, None),
        ("tid", Any, None),
        ("ts", Any, None),
        ("dur", Any, None),
        ("args", _Args | None, None),
    ],
    gc=False,
)


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
_XEvent = msgspec.defstruct(  # type: ignore[misc]
    "_XEvent",
    [
        ("cat", Any, None),
        ("name", Any, None),
        ("pid", Any, None),
        ("tid", Any, None),
        ("ts", Any, None),
        ("dur", Any, None),
        ("args", _Args | None, None),
    ],
    gc=False,
    tag_field="ph",
    tag="X",
)
_FAST_EVENT: Any = _XEvent
for _ph in _PHASES:
    _FAST_EVENT = _FAST_EVENT | msgspec.defstruct(f"_Skip{ord(_ph)}", [], gc=False, tag_field="ph", tag=_ph)


class _Top(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815 - the JSON key
    nodes: msgspec.Raw = msgspec.Raw()
    schema: Any = None
    baseTimeNanoseconds: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    host_name: Any = None


BATCH = 50_000
_SKIP_SPELLINGS = frozenset({"Trace", "trace"})
_CPU_KINDS = [c for c, (k, _) in CATEGORY_KIND.items() if k in ("cpu_op", "annotation")]


#: Case-insensitive superset of what ``may_be_comm`` looks for (an ASCII letter in the lower-cased
#: name comes from that letter in either case), so only these rows need the exact test.
_COMM_HINT = r"(?i)nccl|rccl|msccl|record_param_comms|c10d::|gloo:|mpi:|ucc:"


def _comm_candidates(name_s: pl.Series, cat_s: pl.Series, hint: pl.Series | None = None) -> pl.Series:
    """Positions of the events ``may_be_comm`` accepts, computed on whole columns. ``hint`` may
    pass ``name_s.str.contains(_COMM_HINT)`` when the caller has it. (The reader takes the same two
    steps: the hint per distinct name, then ``_comm_hits`` on those rows.)"""
    pre = (name_s.str.contains(_COMM_HINT) if hint is None else hint).arg_true()
    if pre.len() == 0:
        return pre
    return pre.gather(_comm_hits(name_s.gather(pre), cat_s.gather(pre)))


def _lower(s: pl.Series) -> pl.Series:
    """``s.str.to_lowercase()``, lower-casing only the distinct values (categories repeat a lot)."""
    u = s.unique()
    lu = u.str.to_lowercase()
    changed = u.ne_missing(lu)
    if not changed.any():
        return s
    return s.replace(u.filter(changed), lu.filter(changed))


def _comm_hits(name_s: pl.Series, cat_s: pl.Series) -> pl.Series:
    lname = name_s.str.to_lowercase()
    known = cat_s.is_in(list(CATEGORY_KIND))
    kernel = cat_s == "kernel"
    cpu_like = cat_s.is_in(_CPU_KINDS) | ~known  # cpu_op, annotation, or an unknown category ("other")
    hit = (kernel & lname.str.contains("nccl|rccl|msccl")) | (
        cpu_like
        & ((lname == "record_param_comms") | lname.str.contains(r"^(?:c10d::|nccl:|gloo:|rccl:|mpi:|ucc:)"))
    )
    return hit.arg_true()


_NO_ARGS = _Args()

# The args of the few rows the native path decodes (comm candidates, cuda_sync): the comm args
# decoded as values at once (what ``_comm_dict`` gets from their raw JSON), UNSET when absent.
_ArgsValues = msgspec.defstruct(  # type: ignore[misc]
    "_ArgsValues",
    [(f, Any, None) for f in _SYNC_FIELDS] + [(f, Any, msgspec.UNSET) for f in _COMM_FIELDS],
    gc=False,
    rename={**_SYNC_FIELDS, **_COMM_FIELDS},
)
_NO_ARG_VALUES = _ArgsValues()
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


def _us_col(xs: list[Any], key: str) -> np.ndarray:
    """``us_to_ns`` of one attribute of every event, through a float array when all are numbers."""
    try:
        a = np.fromiter(map(_get[key], xs), dtype=np.float64, count=len(xs))
    except (TypeError, ValueError):
        a = None
    if a is None or np.isnan(a).any():  # a missing value (None, read as NaN here) is 0 in us_to_ns
        return us_to_ns([getattr(e, key) for e in xs])
    ip = np.floor(a)
    return ip.astype(np.int64) * 1000 + np.rint((a - ip) * 1000.0).astype(np.int64)


def _decode_top(raw: bytes, path: str | os.PathLike[str]) -> _Top:
    try:
        return msgspec.json.decode(raw, type=_Top)
    except msgspec.ValidationError as exc:
        msg = str(exc).split("\n")[0]
        if "Expected `object`" in msg:
            raise InputError(path, "JSON is not an object (expected a Kineto profile or host ET)") from None
        raise InputError(path, f"unexpected Kineto profile layout: {msg}") from None
    except msgspec.DecodeError as exc:
        raise InputError(
            path, f"not valid JSON (truncated or corrupt?): {str(exc).splitlines()[0]}"
        ) from None


def _open_stream(path: str | os.PathLike[str]) -> Any:
    """The file as a binary stream of its JSON: plain files as they are, gzip decompressed on the fly."""
    import gzip
    from pathlib import Path

    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed by the caller (or below)
    except FileNotFoundError:
        raise InputError(p, "no such file") from None
    except IsADirectoryError:
        raise InputError(p, "is a directory, expected a file") from None
    except PermissionError:
        raise InputError(p, "file is not readable (permission denied)") from None
    head = fh.read(2)
    fh.seek(0)
    if not head:
        fh.close()
        raise InputError(p, "file is empty")
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb"), fh
    return fh, fh


#: bytes read (and, for gzip, decompressed) at a time; the events of a chunk are decoded
#: before the next chunk is read, so at most about one chunk of the JSON is in memory
CHUNK = 8 << 20
_COMMA, _OPEN_LIST, _CLOSE_LIST, _QUOTE, _COLON = (ord(c) for c in ',[]":')


def read_kineto(path: str | os.PathLike[str]) -> KinetoProfile:
    """Read a Kineto profile file (``.json`` / ``.json.gz``) into a :class:`KinetoProfile`.

    Same result as ``parse_kineto(load_json(path), path)``, in a fraction of the memory and time:
    the file is read in chunks of ``CHUNK`` bytes (gzip decompressed as it is read), the events
    of ``traceEvents`` are framed by :mod:`~charllm_trace.converters.jsonframe` and decoded in
    batches of at most ``BATCH`` events into columns; everything else in the file (the
    profile-level keys, wherever they are) is kept aside and decoded at the end.
    """
    import zlib

    stream, raw = _open_stream(path)
    try:
        return _read_stream(path, stream)
    except (EOFError, zlib.error) as exc:
        raise InputError(path, f"corrupt or truncated gzip file ({exc})") from None
    except OSError as exc:
        if stream is not raw:  # gzip.BadGzipFile and friends
            raise InputError(path, f"corrupt or truncated gzip file ({exc})") from None
        raise InputError(path, f"cannot read the file ({exc})") from None
    finally:
        stream.close()
        raw.close()


def _read_stream(path: str | os.PathLike[str], stream: Any) -> KinetoProfile:
    cols = _Columns(path)
    try:
        return _read_columns(path, stream, cols)
    finally:
        cols.close()


def _read_columns(path: str | os.PathLike[str], stream: Any, cols: _Columns) -> KinetoProfile:
    from charllm_trace.converters import jsonframe

    buf = bytearray()  # unprocessed bytes, from absolute offset buf_off
    buf_off = 0
    skel = bytearray()  # the document without the events of traceEvents
    skel_to = 0  # absolute offset up to which the bytes outside the events went to skel
    inside = False  # within the traceEvents list
    streamed = False
    ev_from = 0  # absolute offset of the "[" or "," before the events not decoded yet
    list_open = -1  # absolute offset of the "[" of traceEvents
    recent: list[tuple[int, int]] = []  # the last depth-1 events (position, byte)
    got_any = False
    # closed here, not when an error's traceback lets go of it: the reading thread stops first
    with closing(_prefetched(_scanned_chunks(stream, jsonframe))) as chunks:
        for chunk, pos, code, dep in chunks:
            got_any = True
            buf += chunk
            del chunk
            i, m = 0, len(pos)
            while i < m:
                if inside:
                    # only the list's commas (depth 2) and its closing bracket can come here
                    rest = np.flatnonzero(code[i:] != _COMMA)
                    j = i + int(rest[0]) if rest.size else m
                    bounds = [ev_from, *pos[i:j].tolist()]
                    close = int(pos[j]) if j < m else None
                    if close is not None:
                        if code[j] != _CLOSE_LIST:
                            raise InputError(
                                path,
                                "not valid JSON (truncated or corrupt?): mismatched brackets in traceEvents",
                            )
                        bounds.append(close)
                    _decode_spans(path, cols, buf, buf_off, bounds, close is not None, list_open)
                    if close is not None:
                        inside = False
                        skel_to = close  # the "]" goes to skel
                        i = j + 1
                    else:
                        ev_from = bounds[-1]
                        i = m
                    continue
                p, c = int(pos[i]), int(code[i])
                d = int(dep[i])
                if d <= 1:
                    if (
                        c == _OPEN_LIST
                        and d == 1
                        and _is_trace_events_key(recent, skel, buf, buf_off, skel_to)
                    ):
                        if streamed:
                            raise InputError(path, "unexpected Kineto profile layout: two traceEvents lists")
                        skel += buf[skel_to - buf_off : p + 1 - buf_off]
                        skel_to = p + 1
                        inside = streamed = True
                        ev_from = list_open = p
                    recent.append((p, c))
                    if len(recent) > 3:
                        del recent[0]
                i += 1
            if inside:
                keep = ev_from - buf_off
            else:
                skel += buf[skel_to - buf_off :]
                keep = len(buf)
                skel_to = buf_off + keep
            buf = buf[keep:]  # a fresh buffer (the old one may still be exported to a dying view)
            buf_off += keep
    if not got_any:
        raise InputError(path, "file holds no data")
    trim_heap()  # the decoded events' Python objects are gone: give their pages back
    top = _decode_top(skel, path)
    del skel
    if top.traceEvents is None:
        if len(top.nodes):
            raise InputError(path, "is a host execution trace, not a Kineto profile")
        raise InputError(path, "not a Kineto profile (no traceEvents list)")
    top.nodes = msgspec.Raw()
    if not streamed and top.traceEvents:  # a key spelled with escapes: the events came with the rest
        raws = top.traceEvents
        top.traceEvents = None
        for b in range(0, len(raws), BATCH):
            part = raws[b : b + BATCH]
            cols.add(b"[" + b",".join(part) + b"]", len(part))
        del raws
    return cols.finish(top)


def _scanned_chunks(
    stream: Any, jsonframe: Any
) -> Iterator[tuple[bytes, np.ndarray, np.ndarray, np.ndarray]]:
    """The stream's chunks with the framing events the scanner reports in each."""
    st = jsonframe.State()
    base = 0
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            return
        pos, code, dep = jsonframe.scan(np.frombuffer(chunk, dtype=np.uint8), st, base)
        base += len(chunk)
        yield chunk, pos, code, dep


_END = object()


def _prefetched(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, produced one ahead in a thread: reading, decompressing and scanning the next
    chunk (none of which holds the GIL) overlap the decoding of this one."""
    import queue
    import threading

    q: queue.Queue[Any] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(x: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for x in items:
                if not put((x, None)):
                    return
            put((_END, None))
        except BaseException as exc:  # handed to the reader, raised there
            put((None, exc))

    t = threading.Thread(target=run, name="charllm-kineto-read", daemon=True)
    t.start()
    try:
        while True:
            x, exc = q.get()
            if exc is not None:
                raise exc
            if x is _END:
                return
            yield x
            del x
    finally:
        stop.set()
        t.join()


def trim_heap() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; a few ms).

    Decoding a million events makes and frees millions of small Python objects; glibc keeps the
    freed pages (tens of MiB at 1 M events) unless asked. Elsewhere (no glibc) this does nothing."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        _MALLOC_TRIM = False
        try:
            import ctypes

            # the C library already loaded into this process (find_library would run ldconfig or a
            # compiler at run time)
            fn = getattr(ctypes.CDLL(None), "malloc_trim", None)
            if fn is not None:
                fn.argtypes = [ctypes.c_size_t]
                fn.restype = ctypes.c_int
                _MALLOC_TRIM = fn
        except (OSError, AttributeError):
            pass
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM: Any = None


def _is_trace_events_key(
    recent: list[tuple[int, int]], skel: bytearray, buf: bytearray, buf_off: int, skel_to: int
) -> bool:
    """Whether the depth-1 "[" about to open follows the key ``"traceEvents":``."""
    if len(recent) < 3 or recent[-1][1] != _COLON or recent[-2][1] != _QUOTE or recent[-3][1] != _QUOTE:
        return False
    q0, q1 = recent[-3][0], recent[-2][0]
    if q1 - q0 != len("traceEvents") + 1:
        return False
    if q0 >= buf_off:
        key = bytes(buf[q0 - buf_off : q1 + 1 - buf_off])
    else:  # the key was in an earlier chunk, already copied to skel (nothing was left out of it yet)
        key = bytes(skel[q0 : q1 + 1]) if skel_to == len(skel) else b""
    return key == b'"traceEvents"'


def _decode_spans(
    path: str | os.PathLike[str],
    cols: _Columns,
    buf: bytearray,
    buf_off: int,
    bounds: list[int],
    closed: bool,
    list_open: int,
) -> None:
    """Decode the events between consecutive separators ``bounds`` (absolute offsets of the "[",
    the commas and, when ``closed``, the "]"), at most ``BATCH`` events at a time, in place."""
    last = len(bounds) - 1
    if last <= 0:
        return
    k = 0
    while k < last:
        e = min(k + BATCH, last)
        a, z = bounds[k] - buf_off, bounds[e] - buf_off
        buf[a] = _OPEN_LIST  # the separators around the slice become the brackets of a list
        buf[z] = _CLOSE_LIST
        with memoryview(buf) as view:
            data = view[a : z + 1]
            n = cols.add(data, e - k)
            data.release()
        if n != e - k and not (n == 0 and closed and last == 1 and bounds[0] == list_open):
            # an empty element (",," or a trailing comma) decodes as nothing; only "[]" may be empty
            raise InputError(path, "not valid JSON (truncated or corrupt?): an empty element in traceEvents")
        k = e


class _Vocab:
    """Strings stored once: each event's value becomes a code into a growing list of distinct
    values (a dict lookup per event, no per-batch column), and the column is those values
    gathered by code at the end. Gathering shares the values' bytes, so a name repeated a
    million times costs one 16-byte view per row, not a copy each.

    Values are taken as ``parse_kineto`` takes them (None -> "", anything else by ``str``), lower-cased
    with polars when ``lower`` (as ``_lower``); ``flags`` keeps, per distinct value, whether
    ``pattern`` matches it."""

    def __init__(self, pattern: str | None = None, lower: bool = False) -> None:
        self.index: dict[str | None, int] = {}  # raw value (str or None) -> code
        self.codes: dict[str, int] = {}  # value -> code
        self.values: list[str] = []  # code -> value
        self.pattern = pattern
        self.lower = lower
        self.flags = np.zeros(0, dtype=bool)

    def encode(self, raw: list[Any]) -> np.ndarray:
        try:
            return np.fromiter(map(self.index.__getitem__, raw), dtype=np.uint32, count=len(raw))
        except (KeyError, TypeError):
            pass
        try:
            new = {v for v in set(raw) if v not in self.index}
            plain = all(v is None or v.__class__ is str for v in new)
        except TypeError:  # an unhashable value (a list or dict as a name)
            plain = False
        if not plain:  # numbers, lists ...: every value as its string
            raw = ["" if v is None else str(v) for v in raw]
            new = {v for v in set(raw) if v not in self.index}
        keys = sorted(new, key=lambda v: (v is not None, v or ""))
        norm = pl.Series(["" if v is None else v for v in keys], dtype=pl.String)
        if self.lower:
            norm = norm.str.to_lowercase()
        added = []
        for k, v in zip(keys, norm.to_list(), strict=True):
            c = self.codes.get(v)
            if c is None:
                c = self.codes[v] = len(self.values)
                self.values.append(v)
                added.append(v)
            self.index[k] = c
        if self.pattern is not None and added:
            hit = pl.Series(added, dtype=pl.String).str.contains(self.pattern).to_numpy()
            self.flags = np.concatenate([self.flags, hit])
        return np.fromiter(map(self.index.__getitem__, raw), dtype=np.uint32, count=len(raw))

    def value_series(self, codes: np.ndarray) -> pl.Series:
        return pl.Series([self.values[c] for c in codes.tolist()], dtype=pl.String)

    def decode(self, parts: list[np.ndarray]) -> pl.Series:
        codes = pl.Series(np.concatenate(parts) if parts else np.zeros(0, np.uint32), dtype=pl.UInt32)
        parts.clear()
        return pl.Series(self.values, dtype=pl.String).gather(codes)


class _Columns:
    """The columns of the X events, batch by batch: decoded in C (``kineto_native``) where it can,
    by msgspec otherwise (a batch C is not certain of, or no compiled module)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.dec = msgspec.json.Decoder(list[_Event])
        self.fast = msgspec.json.Decoder(list[_FAST_EVENT])
        self.args_dec = msgspec.json.Decoder(_ArgsValues)
        self.comm_pairs: dict[int, bool] = {}  # (name code << 32 | category code) -> may be comm
        self.name_parts: list[np.ndarray] = []  # vocabulary codes
        self.cat_parts: list[np.ndarray] = []
        self.int_parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {k: [] for k in INT_COLUMNS}
        self.ts_parts: list[np.ndarray] = []
        self.dur_parts: list[np.ndarray] = []
        self.comm_args: dict[int, dict[str, Any]] = {}
        self.row0 = 0
        self.n_raw = 0
        self.names = _Vocab(_COMM_HINT)
        self.cats = _Vocab(lower=True)
        self.native = kineto_native.decoder()
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
                self._add_native(batch, data)
                return batch.n_raw
        return self._add_msgspec(data)

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
            self.int_parts[key].append((ints[j], valid[j]))
        self.ts_parts.append(ts)
        self.dur_parts.append(dur)
        with memoryview(data) as view:

            def args_at(i: int) -> Any:
                off = int(aoff[i])
                return _NO_ARG_VALUES if off < 0 else self.args_dec.decode(view[off : off + int(alen[i])])

            for i in self._comm_rows(name_codes, cat_codes).tolist():
                a = args_at(i)
                self.comm_args[self.row0 + i] = {
                    key: v for f, key in _COMM_FIELDS.items() if (v := getattr(a, f)) is not msgspec.UNSET
                }
            sync_code = self.cats.codes.get(SYNC_CATEGORY)
            if sync_code is not None:
                for i in np.flatnonzero(cat_codes == sync_code).tolist():
                    d = _sync_dict(args_at(i))
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
            hit[_comm_hits(self.names.value_series(nc), self.cats.value_series(cc)).to_numpy()] = True
            self.comm_pairs.update(zip(new, hit.tolist(), strict=True))
        ok = np.array([self.comm_pairs[u] for u in uniq.tolist()], dtype=bool)
        return pre[ok[inverse]]

    def _add_msgspec(self, data: Any) -> int:
        path = self.path
        try:
            evs = self.fast.decode(data)
            n_raw = len(evs)
            xs = [e for e in evs if e.__class__ is _XEvent and e.cat not in _SKIP_SPELLINGS]
        except (msgspec.ValidationError, msgspec.DecodeError):
            try:
                evs = self.dec.decode(data)
            except msgspec.ValidationError as exc:
                raise InputError(path, f"malformed Kineto event: {str(exc).splitlines()[0]}") from None
            except msgspec.DecodeError as exc:  # offsets in the message would be within the batch
                msg = re.sub(r" \(byte \d+\)$", "", str(exc).splitlines()[0])
                raise InputError(
                    path, f"not valid JSON (truncated or corrupt?): {msg} in traceEvents"
                ) from None
            n_raw = len(evs)
            xs = [e for e in evs if e.ph == "X" and e.cat not in _SKIP_SPELLINGS]
        del evs
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
            s = _int_series(list(map(_get[key], owner)))
            self.int_parts[key].append((s.fill_null(0).to_numpy(), s.is_not_null().to_numpy()))
        try:
            self.ts_parts.append(_us_col(xs, "ts"))
            self.dur_parts.append(_us_col(xs, "dur"))
        except (TypeError, ValueError) as exc:
            raise InputError(path, f"Kineto event with a non-numeric ts/dur ({exc})") from None
        for i in self._comm_rows(name_codes, cat_codes).tolist():
            self.comm_args[self.row0 + i] = _comm_dict(args[i])
        sync_code = self.cats.codes.get(SYNC_CATEGORY)
        if sync_code is not None:
            for i in np.flatnonzero(cat_codes == sync_code).tolist():
                d = _sync_dict(args[i])
                if d:
                    self.comm_args[self.row0 + i] = d
        self.row0 += len(xs)
        del xs, args  # the comm args' Raw values may be views of ``data``: gone now
        return n_raw

    def finish(self, top: _Top) -> KinetoProfile:
        base = top.baseTimeNanoseconds
        base_ns = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0
        self.close()

        def int_col(key: str) -> pl.Series:
            # one contiguous column at a time, the batch parts freed as it goes
            parts = self.int_parts.pop(key)
            if not parts:
                return pl.Series([], dtype=pl.Int64)
            vals = np.concatenate([v for v, _ in parts])
            valid = np.concatenate([m for _, m in parts])
            parts.clear()
            s = pl.Series(vals, dtype=pl.Int64)
            del vals
            return s if valid.all() else s.scatter(np.flatnonzero(~valid), None)

        cat_all = self.cats.decode(self.cat_parts)
        n = cat_all.len()
        ts = np.concatenate(self.ts_parts) if self.ts_parts else np.zeros(0, dtype=np.int64)
        dur = np.concatenate(self.dur_parts) if self.dur_parts else np.zeros(0, dtype=np.int64)
        self.ts_parts = self.dur_parts = []
        events = pl.DataFrame(
            {
                "row": pl.Series(np.arange(n, dtype=np.int64)),
                "name": self.names.decode(self.name_parts),
                "cat": cat_all,
                "kind": cat_all.replace_strict(
                    list(CATEGORY_KIND),
                    [k for k, _ in CATEGORY_KIND.values()],
                    default="other",
                    return_dtype=pl.String,
                ),
                "on_gpu": cat_all.replace_strict(
                    list(CATEGORY_KIND),
                    [g for _, g in CATEGORY_KIND.values()],
                    default=False,
                    return_dtype=pl.Boolean,
                ),
                "pid": int_col("pid"),
                "tid": int_col("tid"),
                "device": int_col("device").cast(pl.Int32),
                "stream": int_col("stream"),
                "start_ns": pl.Series(ts + base_ns, dtype=pl.Int64),
                "dur_ns": pl.Series(np.maximum(dur, 0), dtype=pl.Int64),
                "correlation": int_col("correlation"),
                "external_id": int_col("external_id"),
                "rf_id": int_col("rf_id"),
            }
        )
        events = _gpu_columns(events)
        doc_meta = {
            "distributedInfo": top.distributedInfo,
            "deviceProperties": top.deviceProperties,
            "host_name": top.host_name,
            "schemaVersion": top.schemaVersion,
            "traceName": top.traceName,
        }
        return _profile(self.path, events, self.comm_args, base_ns, doc_meta, self.n_raw)


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


def _int_series(values: list[Any]) -> pl.Series:
    try:
        return pl.Series(values, dtype=pl.Int64, strict=True)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series([_int_or_none(v) for v in values], dtype=pl.Int64)
