"""The parsed form of a Kineto (PyTorch profiler) trace and the plain reader.

Only complete events (``ph == "X"``) become nodes; flow arrows (``s``/``f``),
instant events, metadata (``M``) and the profiler's own ``Trace`` span are not
nodes. Times: Kineto ``ts``/``dur`` are microseconds (floats with three decimals
in recent profiles, i.e. nanosecond precision). ``ts`` is relative to
``baseTimeNanoseconds`` when the profile has that field, otherwise absolute Unix
microseconds. We convert both to integer Unix-epoch nanoseconds without going
through a float product (integer part x 1000 + rounded fraction), so the three
decimals survive exactly.

:func:`parse_kineto` turns a whole loaded document (one dict per event) into a
:class:`KinetoProfile`; the streaming reader (:mod:`~charllm_trace.converters.kineto_stream`)
gives the same profile from the file without that.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.converters._io import is_host_et, is_kineto
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


def int_or_none(v: Any) -> int | None:
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
        return pl.Series([int_or_none(v) for v in values], dtype=pl.Int64)

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
    events = gpu_columns(events)
    comm_args: dict[int, dict[str, Any]] = {}
    for i, (nm, k) in enumerate(zip(names, kinds, strict=True)):
        if (k in ("kernel", "cpu_op", "annotation", "other")) and may_be_comm(nm, k):
            a = args[i]
            comm_args[i] = {key: a[key] for key in COMM_ARG_KEYS if key in a}
        elif cats[i] == SYNC_CATEGORY:
            d = {key: args[i][key] for key in SYNC_ARG_KEYS if args[i].get(key) is not None}
            if d:
                comm_args[i] = d
    return make_profile(path, events, comm_args, base_ns, doc, len(raw_events))


def gpu_columns(events: pl.DataFrame) -> pl.DataFrame:
    """GPU events: device from args, else the pid (Kineto writes the device as pid); stream from tid."""
    return events.with_columns(
        pl.when(pl.col("on_gpu")).then(pl.coalesce("device", pl.col("pid").cast(pl.Int32))).alias("device"),
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
    pg_config = dist.get("pg_config") or []
    return KinetoProfile(
        path=os.fspath(path),
        events=events,
        comm_args=comm_args,
        base_ns=base_ns,
        rank=int_or_none(dist.get("rank")),
        world_size=int_or_none(dist.get("world_size")),
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        pg_config=[p for p in pg_config if isinstance(p, dict)] if isinstance(pg_config, list) else [],
        device_properties=_device_properties(doc.get("deviceProperties")),
        hostname=doc.get("host_name") if isinstance(doc.get("host_name"), str) else None,
        schema_version=doc.get("schemaVersion"),
        trace_name=doc.get("traceName") if isinstance(doc.get("traceName"), str) else None,
        n_raw_events=n_raw,
    )
