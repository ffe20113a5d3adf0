"""The parsed form of a Kineto (PyTorch profiler) trace and the plain reader.

Only complete events (``ph == "X"``) become nodes; flow arrows (``s``/``f``),
instant events, metadata (``M``) and the profiler's own ``Trace`` span are not
nodes. Times: Kineto ``ts``/``dur`` are microseconds (floats with three decimals
in recent profiles, i.e. nanosecond precision). ``ts`` is relative to
``baseTimeNanoseconds`` when the profile has that field, otherwise absolute Unix
microseconds. Both become integer Unix-epoch nanoseconds. The file readers
(:mod:`~charllm_trace.converters.kineto_stream`, in C and with msgspec) take them
exactly from the decimal text (:mod:`~charllm_trace.converters.kineto_times`): a
float64 cannot hold absolute microseconds with three decimals (at 1.7e15 µs its
spacing is 0.25 µs, an error of up to ±125 ns). :func:`parse_kineto` receives a
loaded document whose times are already floats: it keeps what they hold (integer
part x 1000 + rounded fraction, exact for relative times and integer
microseconds), not the nanoseconds of absolute times with decimals.

:func:`parse_kineto` turns a whole loaded document (one dict per event) into a
:class:`KinetoProfile`; the streaming reader (:mod:`~charllm_trace.converters.kineto_stream`)
gives the same profile from the file without that.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.converters._io import is_host_et, is_kineto
from charllm_trace.converters.kineto_checks import (
    check_events,
    check_id_values,
    check_name_value,
    first_odd_name,
)
from charllm_trace.converters.kineto_devices import ProcessNames, mark_device_activity
from charllm_trace.core.errors import InputError
from charllm_trace.core.event_limit import check_event_count, max_events
from charllm_trace.core.numbers import int_value

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
    # other accelerators' runtime calls (Kineto's XPU, MTIA and PrivateUse1 backends, Glow)
    "xpu_runtime": ("runtime", False),
    "xpu_driver": ("runtime", False),
    "mtia_runtime": ("runtime", False),
    "privateuse1_runtime": ("runtime", False),
    "privateuse1_driver": ("runtime", False),
    "glow_runtime": ("runtime", False),
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
# Device activity under a category not listed here (an accelerator's own): see kineto_devices.
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

#: CPU ops whose ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` args (recorded with
#: ``record_shapes=True``) are kept in ``attrs`` too: matrix products, attention and convolutions,
#: whose FLOPs ``analysis.flops`` counts from them. A superset of the ops it counts.
SHAPE_OP_RE = r"^aten::(\w*mm|matmul|linear|\w*attention\w*|\w*conv\w*)$"
#: The args kept for them (in ``attrs``), when recorded.
SHAPE_ARG_KEYS = ("Input Dims", "Input type", "Concrete Inputs")
_SHAPE_OP = re.compile(SHAPE_OP_RE)


def keeps_shapes(name: Any, kind: str) -> bool:
    """Whether the args of a CPU op named ``name`` hold shapes worth keeping (``SHAPE_OP_RE``)."""
    return kind == "cpu_op" and isinstance(name, str) and _SHAPE_OP.match(name) is not None


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
    # pid -> the process label/name that makes it a device (metadata records; kineto_devices)
    device_labels: dict[int, str] = field(default_factory=dict)


def us_to_ns(values: list[Any]) -> np.ndarray:
    """Microseconds (ints or floats, None allowed -> 0) to int64 nanoseconds: integer part x 1000 +
    rounded fraction. Exact for what the floats hold (three decimals of relative times survive;
    those of absolute Unix microseconds are already lost in the float: see kineto_times)."""
    a = np.array([0.0 if v is None else v for v in values], dtype=np.float64)
    ip = np.floor(a)
    frac = a - ip  # exact (Sterbenz) for |a| >= 1
    return ip.astype(np.int64) * 1000 + np.rint(frac * 1000.0).astype(np.int64)


#: |ts| and dur of an event, in µs, below this (about 285 years): their nanoseconds, with any
#: profile base time, fit in int64. The C decoder (_jsondecode.c) and kineto_times apply the same
#: bound, on the exact decimal value.
MAX_US = 9.0e15


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def time_error(path: str | os.PathLike[str], key: str, name: Any, v: Any) -> InputError:
    """The error for a complete event whose ``ts`` or ``dur`` (``key``) is ``v``: missing (None),
    not a number, beyond :data:`MAX_US` or (dur) negative."""
    want = "a number of microseconds" + (" >= 0" if key == "dur" else "") + " below 9e15"
    return InputError(
        path,
        f"Kineto complete event {_show(name)}: {key} is {'missing' if v is None else _show(v)}, expected {want}",
    )


def strict_us_to_ns(
    path: str | os.PathLike[str], vals: list[Any], key: str, name_of: Callable[[int], Any]
) -> np.ndarray:
    """``us_to_ns`` of the ``ts`` or ``dur`` values (already numbers) of complete events;
    ``InputError`` naming the first event whose value is missing, not a number (``true``
    included), beyond :data:`MAX_US`, or (dur) negative. The file readers use the exact
    ``kineto_times.strict_text_us_to_ns`` on the values' JSON text instead."""
    for i, v in enumerate(vals):
        if type(v) not in (int, float) or not (-MAX_US < v < MAX_US) or (key == "dur" and v < 0):
            raise time_error(path, key, name_of(i), v)
    return us_to_ns(vals)


def base_time_ns(path: str | os.PathLike[str], base: Any) -> int:
    """The profile's ``baseTimeNanoseconds`` (0 when absent); ``InputError`` when it is not an
    integer number of nanoseconds since 1970 that int64 holds."""
    if base is None:
        return 0
    if type(base) not in (int, float) or not (0 <= base < 2**62):
        raise InputError(
            path, f"baseTimeNanoseconds is {_show(base)}, expected nanoseconds since 1970 (an integer >= 0)"
        )
    return int(base)


def check_times(path: str | os.PathLike[str], ts: np.ndarray, dur: np.ndarray, base_ns: int) -> None:
    """Every event's start and end, base time added, fits int64 nanoseconds."""
    if len(ts) and (int(ts.max()) + int(dur.max()) + base_ns >= 2**63 or int(ts.min()) + base_ns < -(2**63)):
        raise InputError(path, "event times beyond the year 2262 (int64 nanoseconds); not a real profile")


def checked_rank(path: str | os.PathLike[str], dist: dict[str, Any]) -> tuple[int | None, int | None]:
    """``distributedInfo``'s rank and world size: JSON integers, 0 <= rank < world_size <= MAX_RANK."""
    from charllm_trace.core.limits import MAX_RANK

    out = []
    for key, lo in (("rank", 0), ("world_size", 1)):
        v = dist.get(key)
        if v is None:
            out.append(None)
            continue
        if type(v) is not int or not lo <= v <= MAX_RANK - (key == "rank"):
            raise InputError(
                path,
                f"distributedInfo.{key} is {_show(v)}, expected an integer from {lo} to {MAX_RANK - (key == 'rank'):,}",
            )
        out.append(v)
    rank, world = out
    if rank is not None and world is not None and rank >= world:
        raise InputError(path, f"distributedInfo.rank {rank} is not below its world_size {world}")
    return rank, world


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


def int_or_none(v: Any) -> int | None:
    """An id of a Kineto event: a bool is 0 / 1, a string may carry a 0x / 0o / 0b prefix."""
    return int_value(v, True, 0)


def checked_ints(path: str | os.PathLike[str], key: str, values: list[Any]) -> list[int | None]:
    """The id column ``key`` (pid, tid, args.correlation ...) of events, each value read by
    ``int_or_none``; ``InputError`` for a value beyond int64 or given but not an integer."""
    ints = [int_value(v, True, 0) for v in values]  # int_or_none, one call a value
    big = next((v for v in ints if v is not None and not -(2**63) <= v < 2**63), None)
    if big is not None:
        raise InputError(path, f"Kineto event {key} {big} is beyond a 64-bit integer")
    check_id_values(path, key, values, ints)
    return ints


def may_be_comm(name: str, kind: str) -> bool:
    """Whether an event's args may describe a collective (kept in ``comm_args``). ``kind`` is its
    category's (``other`` for a category not listed: it may be an accelerator's device activity)."""
    n = name.lower()
    library = "nccl" in n or "rccl" in n or "msccl" in n or "hccl" in n
    if kind == "kernel":
        return library
    return (
        (kind == "other" and library)
        or n == "record_param_comms"
        or n.startswith(("c10d::", "nccl:", "gloo:", "rccl:", "hccl:", "mpi:", "ucc:"))
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
    check_event_count(path, n, max_events())
    raw_names = [e.get("name") for e in xs]
    check_name_value(path, first_odd_name(raw_names), None in raw_names)
    names = [str(e.get("name", "")) for e in xs]
    kinds_gpu = [CATEGORY_KIND.get(c, ("other", False)) for c in cats]
    kinds = [k for k, _ in kinds_gpu]
    on_gpu = [g for _, g in kinds_gpu]
    args = [e.get("args") or {} for e in xs]
    if any(not isinstance(a, dict) for a in args):
        args = [a if isinstance(a, dict) else {} for a in args]
    ts = strict_us_to_ns(path, [e.get("ts") for e in xs], "ts", lambda i: xs[i].get("name"))
    dur = strict_us_to_ns(path, [e.get("dur") for e in xs], "dur", lambda i: xs[i].get("name"))
    base_ns = base_time_ns(path, doc.get("baseTimeNanoseconds"))
    check_times(path, ts, dur, base_ns)

    def icol(values: list[Any], key: str) -> pl.Series:
        return pl.Series(checked_ints(path, key, values), dtype=pl.Int64)

    pids = icol([e.get("pid") for e in xs], "pid")
    tids = icol([e.get("tid") for e in xs], "tid")
    events = pl.DataFrame(
        {
            "row": pl.Series(np.arange(n, dtype=np.int64)),
            "name": pl.Series(names, dtype=pl.String),
            "cat": pl.Series(cats, dtype=pl.String),
            "kind": pl.Series(kinds, dtype=pl.String),
            "on_gpu": pl.Series(on_gpu, dtype=pl.Boolean),
            "pid": pids,
            "tid": tids,
            "device": icol([a.get("device") for a in args], "device").cast(pl.Int32),
            "stream": icol([a.get("stream") for a in args], "stream"),
            "start_ns": pl.Series(ts + base_ns, dtype=pl.Int64),
            "dur_ns": pl.Series(dur, dtype=pl.Int64),
            "correlation": icol([a.get("correlation") for a in args], "correlation"),
            "external_id": icol([a.get("External id") for a in args], "external_id"),
            "rf_id": icol([a.get("Record function id") for a in args], "rf_id"),
        }
    )
    procs = ProcessNames()
    for e in raw_events:
        if isinstance(e, dict) and e.get("ph") == "M":
            procs.add(e.get("name"), e.get("pid"), e.get("args"))
    device_pids = procs.device_pids()
    events = gpu_columns(mark_device_activity(events, device_pids), path)
    comm_args: dict[int, dict[str, Any]] = {}
    for i, (nm, k) in enumerate(zip(names, kinds, strict=True)):
        if (k in ("kernel", "cpu_op", "annotation", "other")) and may_be_comm(nm, k):
            a = args[i]
            comm_args[i] = {key: a[key] for key in COMM_ARG_KEYS if key in a}
        elif keeps_shapes(nm, k):
            d = {key: args[i][key] for key in SHAPE_ARG_KEYS if key in args[i]}
            if d:
                comm_args[i] = d
        elif cats[i] == SYNC_CATEGORY:
            d = {key: args[i][key] for key in SYNC_ARG_KEYS if args[i].get(key) is not None}
            if d:
                comm_args[i] = d
    prof = make_profile(path, events, comm_args, base_ns, doc, len(raw_events))
    prof.device_labels = device_pids
    return prof


def gpu_columns(events: pl.DataFrame, path: str | os.PathLike[str] = "") -> pl.DataFrame:
    """GPU events: device from args, else the pid (Kineto writes the device as pid); stream from tid.
    ``InputError`` for a device index (args.device, or the pid of a GPU event without one) that
    is not a 32-bit integer."""
    bad = events.filter(
        pl.col("on_gpu") & ~pl.coalesce("device", "pid").is_between(-(2**31), 2**31 - 1).fill_null(True)
    )
    if bad.height:
        r = bad.row(0, named=True)
        v = r["device"] if r["device"] is not None else r["pid"]
        raise InputError(path, f"GPU event {_show(r['name'])} names device {v}, not a device index")
    return events.with_columns(
        pl.when(pl.col("on_gpu"))
        .then(pl.coalesce("device", pl.col("pid").cast(pl.Int32, strict=False)))
        .alias("device"),
        pl.when(pl.col("on_gpu")).then(pl.coalesce("stream", "tid")).alias("stream"),
        pl.when(pl.col("on_gpu")).then(None).otherwise(pl.col("tid")).alias("tid"),
    )


def make_profile(
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
    rank, world_size = checked_rank(path, dist)
    check_events(path, events)
    pg_config = dist.get("pg_config") or []
    return KinetoProfile(
        path=os.fspath(path),
        events=events,
        comm_args=comm_args,
        base_ns=base_ns,
        rank=rank,
        world_size=world_size,
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        pg_config=[p for p in pg_config if isinstance(p, dict)] if isinstance(pg_config, list) else [],
        device_properties=_device_properties(doc.get("deviceProperties")),
        hostname=doc.get("host_name") if isinstance(doc.get("host_name"), str) else None,
        schema_version=doc.get("schemaVersion"),
        trace_name=doc.get("traceName") if isinstance(doc.get("traceName"), str) else None,
        n_raw_events=n_raw,
    )
