"""The in-memory trace model: one rank's trace as polars tables.

Every part of charllm-trace speaks this model. Converters build it, the Chakra
ET reader and writer move it to and from disk, analyses are pure functions of
it. The column contract lives here and only here; ``docs/model.md`` explains it
for readers.

Time is integer nanoseconds on the Unix epoch clock. A trace whose source had no
timestamps (Chakra's own converter writes ``start_time_micros = 0``) has
``meta.has_timestamps = False`` and null ``start_ns`` everywhere: we never
pretend every op started at 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

MODEL_VERSION = "1.0"

# ---------------------------------------------------------------------------
# Vocabularies
# ---------------------------------------------------------------------------

#: Chakra node types (names of ``ChakraProtoMsg.NodeType`` without ``_NODE``).
NODE_TYPES = (
    "METADATA",
    "MEM_LOAD",
    "MEM_STORE",
    "COMP",
    "COMM_SEND",
    "COMM_RECV",
    "COMM_COLL",
    "INVALID",
)

#: What a node is, independent of the Chakra type (the Kineto category, roughly).
NODE_KINDS = (
    "cpu_op",  # an operator or Python/user range on a CPU thread
    "annotation",  # a user/profiler annotation (ProfilerStep#N, record_function ranges)
    "runtime",  # a CUDA/HIP runtime or driver call (cudaLaunchKernel ...)
    "kernel",  # a GPU kernel (compute or communication)
    "memcpy",  # a GPU memory copy
    "memset",  # a GPU memory set
    "gpu_annotation",  # a range on a GPU stream (gpu_user_annotation)
    "sync",  # a CUPTI synchronisation record (Kineto cuda_sync: event/stream/context sync, stream wait event)
    "other",
)

#: Collective types; the names follow nccl-tests / torch.distributed.
COLL_TYPES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "send",
    "recv",
    "barrier",
)

# ---------------------------------------------------------------------------
# Table schemas
# ---------------------------------------------------------------------------

IO_STRUCT = pl.Struct({"values": pl.String, "shapes": pl.String, "types": pl.String})

#: One row per node. ``id`` is unique within a rank.
NODE_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Int64,
    "name": pl.String,
    "node_type": pl.String,  # one of NODE_TYPES
    "kind": pl.String,  # one of NODE_KINDS
    "on_gpu": pl.Boolean,
    "pid": pl.Int64,  # process id (CPU) or GPU device id as Kineto writes it
    "tid": pl.Int64,  # CPU thread id; null on GPU
    "device": pl.Int32,  # GPU index the node ran on; null on CPU
    "stream": pl.Int64,  # GPU stream; null on CPU
    "start_ns": pl.Int64,  # Unix epoch ns; null when unknown
    "dur_ns": pl.Int64,  # null when unknown; inclusive (children's time included)
    "self_ns": pl.Int64,  # exclusive time: dur_ns less the CPU children's dur_ns (derived, see self_times)
    "parent": pl.Int64,  # enclosing CPU op (call tree); null for roots
    "launch_id": pl.Int64,  # for GPU nodes: id of the CPU op that launched them
    "correlation": pl.Int64,  # Kineto runtime correlation id
    "rf_id": pl.Int64,  # record-function id (host ET <-> Kineto key)
    "external_id": pl.Int64,  # Kineto External id
    "coll_type": pl.String,  # one of COLL_TYPES; null for non-communication
    "comm_bytes": pl.Int64,  # nccl-tests message size, see docs/et-conventions.md
    "dtype": pl.String,
    "num_elems": pl.Int64,
    "pg_name": pl.String,  # process group name (key into meta.process_groups)
    "coll_seq": pl.Int64,  # per-process-group sequence number
    "peer": pl.Int32,  # global rank of the send/recv peer
    "root": pl.Int32,  # root rank of broadcast/reduce/gather/scatter
    "in_split": pl.List(pl.Int64),  # all_to_all input split sizes (elements)
    "out_split": pl.List(pl.Int64),  # all_to_all output split sizes (elements)
    "inputs": IO_STRUCT,  # Chakra IOInfo, kept verbatim
    "outputs": IO_STRUCT,
    "attrs": pl.String,  # JSON object of attributes with no column (verbatim)
}

#: ``attrs`` key of the group size an all_gather's / reduce_scatter's own tensors imply (output /
#: input elements), written by the converters where they know both counts; the bandwidth analysis
#: prefers it to the process group's or world's size when they disagree.
ATTR_TENSOR_GROUP = "tensor_group_size"

#: Dependency kinds: control (parent, launching op, ordering) and data (producer of an input tensor).
DEP_KINDS = ("ctrl", "data")

#: Edges: ``node`` depends on ``dep``. ``kind`` is "ctrl" or "data", as an Enum (one byte per
#: edge instead of a string; it compares with plain strings: ``pl.col("kind") == "ctrl"``).
#: Frames built with a String ``kind`` become this type through ``conform`` (``Trace`` does it).
DEP_SCHEMA: dict[str, pl.DataType] = {
    "node": pl.Int64,
    "dep": pl.Int64,
    "kind": pl.Enum(DEP_KINDS),
}

#: Execution-dependency kinds (``charllm_trace.graph``): what must happen before what.
EXEC_DEP_KINDS = (
    "thread_order",  # consecutive top-level ops (or siblings) on one CPU thread
    "nesting",  # a nested op inside its parent: starts after the parent starts, ends before it ends
    "launch",  # CPU runtime call (cudaLaunchKernel ...) -> the GPU op it launched (correlation)
    "stream_order",  # consecutive ops on one GPU stream
    "sync",  # GPU op -> CPU call that waited for it, or GPU op -> op on another stream that waited for it
    "data",  # producer of an input tensor (host execution trace)
    "collective",  # the same collective instance (group, sequence) on another rank
    "wake",  # inferred: a CPU thread starts or resumes right after another thread's op (graph/points.py)
)

#: Execution dependencies of one rank (``graph.execution_deps``): ``node`` cannot pass a point
#: before ``dep`` passes one. ``dep_end``: the constraint starts at the dep's end (else its start);
#: ``node_end``: it holds the node's end (else its start). ``dep_rank`` is the rank of ``dep`` (null:
#: this rank; set only for ``collective`` edges).
EXEC_DEP_SCHEMA: dict[str, pl.DataType] = {
    "node": pl.Int64,
    "dep": pl.Int64,
    "kind": pl.Enum(EXEC_DEP_KINDS),
    "dep_end": pl.Boolean,
    "node_end": pl.Boolean,
    "dep_rank": pl.Int64,
}

#: GPU telemetry samples. Energy counter in joules (cumulative, device-defined origin).
TELEMETRY_SCHEMA: dict[str, pl.DataType] = {
    "time_ns": pl.Int64,  # Unix epoch ns, same clock as node times
    "device": pl.Int32,  # local GPU index
    "power_w": pl.Float64,
    "energy_j": pl.Float64,  # cumulative energy counter; null if absent
    "temp_c": pl.Float64,
    "mem_temp_c": pl.Float64,
    "sm_clock_mhz": pl.Float64,
    "mem_clock_mhz": pl.Float64,
    "util_pct": pl.Float64,
    "power_limit_w": pl.Float64,
    "throttle_reasons": pl.Int64,  # bit mask, see collectors/telemetry docs
}

#: Chakra node types of communication operations.
COMM_NODE_TYPES = ("COMM_COLL", "COMM_SEND", "COMM_RECV")

#: Rows of the steps table derived from ``ProfilerStep#N`` annotations.
STEP_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}


def rank_ranges(ranks: Iterable[int]) -> str:
    """Ranks as ranges: [0, 1, 2, 5, 7, 8] -> "0-2,5,7-8" ("none" for no rank)."""
    out: list[list[int]] = []
    for r in sorted(set(ranks)):
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out) or "none"


def empty_frame(schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=dict(schema))


def conform(df: pl.DataFrame, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """Return ``df`` with exactly the columns of ``schema``, in order and type.

    Missing columns are added as nulls; extra columns are an error (they would be
    silently dropped otherwise).
    """
    extra = set(df.columns) - set(schema)
    if extra:
        raise ValueError(f"columns not in the model: {sorted(extra)}")
    exprs = []
    for name, dtype in schema.items():
        if name in df.columns:
            col = pl.col(name)
            exprs.append(col if df.schema[name] == dtype else col.cast(dtype))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(exprs)


def self_times(nodes: pl.DataFrame) -> pl.Series:
    """Exclusive time of every node: ``dur_ns`` less the summed ``dur_ns`` of its CPU children
    (nodes whose ``parent`` is it and that are not on a GPU), never below 0; null where
    ``dur_ns`` is null. GPU nodes keep their duration (nothing nests in a kernel)."""
    import numpy as np

    n = nodes.height
    ids = nodes["id"].to_numpy()
    dur = nodes["dur_ns"]
    child = (nodes["parent"].is_not_null() & ~nodes["on_gpu"].fill_null(False) & dur.is_not_null()).to_numpy()
    par = nodes["parent"].fill_null(-1).to_numpy()[child]
    cdur = dur.fill_null(0).to_numpy()[child].astype(np.float64)
    if n and ids[0] == 0 and ids[-1] == n - 1 and bool((np.diff(ids) == 1).all()):
        pos = par  # ids are row numbers (a converted Kineto profile)
        ok = (pos >= 0) & (pos < n)
    else:
        order = np.argsort(ids, kind="stable")
        k = np.minimum(np.searchsorted(ids[order], par), max(n - 1, 0))
        ok = ids[order][k] == par if n else np.zeros(0, bool)
        pos = order[k]
    sums = np.bincount(pos[ok], weights=cdur[ok], minlength=n).astype(np.int64)
    own = dur.fill_null(0).to_numpy() - sums
    return pl.Series("self_ns", np.maximum(own, 0), dtype=pl.Int64).set(dur.is_null(), None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessGroup:
    """A communicator: its name (as torch.distributed names it), description and global ranks."""

    name: str
    desc: str | None = None
    ranks: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass
class TraceMeta:
    """What is known about the rank as a whole."""

    rank: int | None = None
    world_size: int | None = None
    device_model: str | None = None  # e.g. "NVIDIA H100 80GB HBM3"
    device_index: int | None = None  # local GPU index of this rank
    hostname: str | None = None
    has_timestamps: bool = True
    clock: str = "unix_ns"  # "unix_ns" when times are Unix-epoch ns; "none" otherwise
    source: str = "unknown"  # e.g. "chakra-et", "kineto", "host_et+kineto"
    source_schema: str | None = None  # schema/version string of the source
    model_version: str = MODEL_VERSION
    process_groups: tuple[ProcessGroup, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # anything else, JSON-serialisable

    def group(self, name: str) -> ProcessGroup | None:
        for pg in self.process_groups:
            if pg.name == name:
                return pg
        return None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["process_groups"] = [
            {"name": p.name, "desc": p.desc, "ranks": list(p.ranks)} for p in self.process_groups
        ]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TraceMeta:
        d = dict(d)
        pgs = tuple(
            ProcessGroup(name=p["name"], desc=p.get("desc"), ranks=tuple(p.get("ranks") or ()))
            for p in d.pop("process_groups", ()) or ()
        )
        known = {f.name for f in dataclasses.fields(cls)}
        extra = dict(d.pop("extra", {}) or {})
        for k in list(d):
            if k not in known:
                extra[k] = d.pop(k)
        return cls(process_groups=pgs, extra=extra, **d)


# ---------------------------------------------------------------------------
# Trace and Run
# ---------------------------------------------------------------------------


@dataclass
class Trace:
    """One rank's trace: nodes, dependencies, telemetry and metadata."""

    nodes: pl.DataFrame
    deps: pl.DataFrame = field(default_factory=lambda: empty_frame(DEP_SCHEMA))
    telemetry: pl.DataFrame = field(default_factory=lambda: empty_frame(TELEMETRY_SCHEMA))
    meta: TraceMeta = field(default_factory=TraceMeta)
    #: the step ranges when they are not ProfilerSteps (``analyze --step-marker``: analysis/marker_steps.py)
    step_ranges: pl.DataFrame | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        has_self = "self_ns" in self.nodes.columns and self.nodes["self_ns"].null_count() < self.nodes.height
        self.nodes = conform(self.nodes, NODE_SCHEMA)
        if not has_self and self.nodes.height:
            self.nodes = self.nodes.with_columns(self_times(self.nodes))
        self.deps = conform(self.deps, DEP_SCHEMA)
        self.telemetry = conform(self.telemetry, TELEMETRY_SCHEMA)

    # Convenience views -------------------------------------------------
    @property
    def rank(self) -> int | None:
        return self.meta.rank

    def steps(self) -> pl.DataFrame:
        """``ProfilerStep#N`` windows (step, start_ns, end_ns), sorted by start; empty if none."""
        if not self.meta.has_timestamps:
            return empty_frame(STEP_SCHEMA)
        if self.step_ranges is not None:
            return self.step_ranges
        return (
            self.nodes.lazy()
            .filter(~pl.col("on_gpu") & pl.col("name").str.starts_with("ProfilerStep#"))
            .select(
                pl.col("name").str.extract(r"ProfilerStep#(\d+)", 1).cast(pl.Int64).alias("step"),
                pl.col("start_ns"),
                (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
            )
            .drop_nulls()
            .unique(subset="step", keep="first")
            .sort("start_ns")
            .collect()
        )

    def equals(self, other: Trace) -> bool:
        """Exact equality of all tables and metadata (row order of nodes/deps ignored)."""
        if self.meta.to_dict() != other.meta.to_dict():
            return False
        a = self.nodes.sort("id")
        b = other.nodes.sort("id")
        if not a.equals(b, null_equal=True):
            return False
        ka = self.deps.sort(["node", "dep", "kind"])
        kb = other.deps.sort(["node", "dep", "kind"])
        if not ka.equals(kb, null_equal=True):
            return False
        ta = self.telemetry.sort(["device", "time_ns"])
        tb = other.telemetry.sort(["device", "time_ns"])
        return ta.equals(tb, null_equal=True)


@dataclass
class Run:
    """A multi-rank run: one Trace per rank, plus run-level metadata (the manifest)."""

    traces: dict[int, Trace]
    manifest: dict[str, Any] = field(default_factory=dict)
    source: str | None = None  # path the run was loaded from, for messages
    #: CPU scheduler telemetry of a collected run (``collect --cpu-hz``): the threads' samples, the
    #: cgroup's, and the reader's notes (``converters.cpu_sched.read_cpu_sched``); None: none
    cpu_sched: tuple[pl.DataFrame, pl.DataFrame, list[str]] | None = field(
        default=None, compare=False, repr=False
    )

    def __iter__(self) -> Iterator[Trace]:
        return iter(self.traces[r] for r in sorted(self.traces))

    def __len__(self) -> int:
        return len(self.traces)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.traces)

    def select(self, ranks: Iterable[int]) -> Run:
        keep = {r: self.traces[r] for r in ranks if r in self.traces}
        return Run(traces=keep, manifest=self.manifest, source=self.source, cpu_sched=self.cpu_sched)

    @classmethod
    def single(cls, trace: Trace, source: str | None = None) -> Run:
        rank = trace.meta.rank if trace.meta.rank is not None else 0
        return cls(traces={rank: trace}, source=source)
