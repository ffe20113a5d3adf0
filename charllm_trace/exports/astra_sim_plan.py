"""Which nodes of one rank go into its ASTRA-sim ET, with what duration, in what order.

ASTRA-sim (astra-sim 518bd51) runs, per NPU, one compute node and one collective at a time
and knows only GPU compute and communication (``docs/et-conventions.md``, *The ASTRA-sim
flavour*). So each rank is projected onto:

- **GPU runs** (the rank has timed GPU ops): GPU kernels, memcpys and memsets as compute;
  communication kernels (and CPU collectives with no GPU kernel) as communication. CPU
  ops are left out.
- **CPU runs** (gloo): every timed CPU op and annotation with its *exclusive* time as
  compute, the collectives (``gloo:…``, typed ``COMM_*`` by the converter) as
  communication. Left out: METADATA nodes, the host ET's ``[pytorch|profiler|…]``
  container nodes, and ops a collective's worker thread ran inside the collective.
  Annotation time that is not covered by any traced op and overlaps a collective of the
  rank is taken as waiting for it (ASTRA-sim simulates that wait) and dropped.
- **Host gaps** (both modes, unless ``host_gaps=False``): the time between the rank's first and
  last exported op that no exported op covers, as compute on ``HOST_LANE`` (:func:`host_gaps`).

Order is given as data dependencies (the sole dependency kind the export writes):

- *lanes*: each GPU stream / CPU thread chains its nodes in execution order (start time;
  on a CPU thread a parent before its children, so exclusive times add up to the span),
  and all communication nodes of the rank form one more lane, in the order every rank
  shares (ASTRA-sim issues one collective at a time and pairs them across NPUs by issue
  order);
- *sync → launch* (GPU runs, from ``graph.execution_deps``): a GPU op waits for the GPU op
  that the latest synchronising call before its launch, on the launching thread, waited
  for; GPU-to-GPU ``sync`` edges directly;
- ``data`` edges of the execution graph between exported nodes on different lanes;
- *collective issue and completion* (measured order): a collective waits for the last node
  of each other lane before it (on a CPU thread: the last that started before it; on a
  GPU stream: the last that ended before it), and the first node of each other lane that
  started after it ended waits for it;
- a lane's first node with no dependency waits for the node that ended last before it
  started, so only nodes that start before anything ended are dependency-free.

Every edge runs forward in one total order of the exported nodes (start, then longest
first, then id), so the result is acyclic by construction; an edge that would run
backwards is dropped and counted. Everything is polars/numpy over whole columns.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from charllm_trace.core.model import Trace
from charllm_trace.graph import execution_deps

CONTAINER_RE = r"^\[pytorch\|profiler\|execution_trace\|"
GPU_CLASSES = ["compute", "comm", "memcpy", "memset"]
CPU_KINDS = ["cpu_op", "annotation", "runtime", "other"]
COMM_LANE = -1
HOST_LANE = -2  # host time the trace shows as nothing: GPU idle intervals, the start offset
#: as-of joins here are on sorted columns; polars cannot check that with ``by`` and warns
_ASOF_KW = (
    {"check_sortedness": False}
    if "check_sortedness" in inspect.signature(pl.DataFrame.join_asof).parameters
    else {}
)


@dataclass
class RankPlan:
    """One rank's exported nodes (in ``pos`` order) and data dependencies (ids)."""

    rank: int
    mode: str  # "gpu" or "cpu"
    nodes: pl.DataFrame
    deps: pl.DataFrame  # node, dep
    lanes: dict[int, str] = field(default_factory=dict)
    dropped_backward: int = 0
    waiting_ns: int = 0  # annotation time taken as waiting for a collective (CPU runs)

    @property
    def span_ns(self) -> int:
        n = self.nodes
        return int(n["end_ns"].max() - n["start_ns"].min()) if n.height else 0

    @property
    def dependency_free(self) -> int:
        return int(self.nodes.height - self.deps["node"].n_unique()) if self.nodes.height else 0


def select(classified: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """The nodes to export (columns of ``classify(trace.nodes)`` plus ``end_ns``, ``is_comm``,
    ``lane``) and the mode, ``gpu`` or ``cpu``."""
    nodes = classified.with_columns(
        end_ns=pl.col("start_ns") + pl.col("dur_ns"),
        is_comm=pl.col("node_type").fill_null("").str.starts_with("COMM_") | (pl.col("cls") == "comm"),
    )
    timed = pl.col("start_ns").is_not_null() & pl.col("dur_ns").is_not_null() & (pl.col("dur_ns") >= 0)
    gpu = pl.col("on_gpu").fill_null(False)
    gpu_sel = nodes.filter(timed & gpu & pl.col("cls").is_in(GPU_CLASSES))
    if gpu_sel.height:
        keys = gpu_sel.filter("is_comm").select(pl.col("pg_name").fill_null(""), "coll_seq")
        cpu_comm = nodes.filter(timed & ~gpu & pl.col("is_comm")).join(
            keys,
            left_on=[pl.col("pg_name").fill_null(""), "coll_seq"],
            right_on=["pg_name", "coll_seq"],
            how="anti",
        )
        sel = pl.concat([gpu_sel, cpu_comm]) if cpu_comm.height else gpu_sel
        lane = pl.struct(pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1)).rank("dense") - 1
        sel = sel.with_columns(lane=pl.when(gpu).then(lane.cast(pl.Int64)).otherwise(pl.lit(COMM_LANE)))
        return sel, "gpu"
    cpu = nodes.filter(
        timed
        & ~gpu
        & (pl.col("node_type").fill_null("") != "METADATA")
        & pl.col("kind").fill_null("other").is_in(CPU_KINDS)
        & ~pl.col("name").fill_null("").str.contains(CONTAINER_RE)
    )
    comm = cpu.filter("is_comm")
    if comm.height:  # drop what a collective's own thread ran inside it
        win = comm.select(
            pl.col("tid").fill_null(-1).alias("_t"),
            pl.col("start_ns").alias("_cs"),
            pl.col("end_ns").alias("_ce"),
        )
        cpu = (
            cpu.with_columns(_t=pl.col("tid").fill_null(-1))
            .sort("start_ns")
            .join_asof(
                win.sort("_cs"), left_on="start_ns", right_on="_cs", by="_t", strategy="backward", **_ASOF_KW
            )
            .filter(pl.col("is_comm") | pl.col("_ce").is_null() | (pl.col("end_ns") > pl.col("_ce")))
            .drop("_t", "_cs", "_ce")
        )
    sel = cpu.with_columns(lane=(pl.col("tid").fill_null(-1).rank("dense") - 1).cast(pl.Int64))
    return sel, "cpu"


def host_gaps(sel: pl.DataFrame, first_id: int, mode: str = "gpu") -> pl.DataFrame:
    """``--host-gaps``: one compute row (lane ``HOST_LANE``) per interval in which no exported
    op of the rank ran, between its first start and its last end: in GPU runs the time the
    GPU waited for the host (launches, Python, synchronisation), in CPU runs the time no
    traced op covers (Python between ops, the interpreter, untraced work), which ASTRA-sim
    otherwise does not see. Rows have the columns ``id``, ``name``, ``kind``, ``start_ns``,
    ``end_ns``, ``dur_ns``, ``self_ns``, ``is_comm``, ``lane``; ids from ``first_id`` on."""
    g = sel.filter(pl.col("on_gpu").fill_null(False)) if mode == "gpu" else sel
    us, ue = _union(g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
    a, b = ue[:-1], us[1:]
    keep = b - a >= 1000
    a, b = a[keep], b[keep]
    base = first_id
    return pl.DataFrame(
        {
            "id": np.arange(base, base + len(a), dtype=np.int64),
            "name": ["charllm.host_gap"] * len(a),
            "kind": ["host_gap"] * len(a),
            "start_ns": a,
            "end_ns": b,
            "dur_ns": b - a,
            "self_ns": b - a,
            "is_comm": np.zeros(len(a), bool),
            "lane": np.full(len(a), HOST_LANE, np.int64),
        }
    )


def start_offset(first: int, start: int, node_id: int) -> pl.DataFrame:
    """A compute row (lane ``HOST_LANE``) from the first rank's start to this rank's: ASTRA-sim
    starts every NPU at time 0, the ranks of a trace did not."""
    return pl.DataFrame(
        {
            "id": [node_id],
            "name": ["charllm.start_offset"],
            "kind": ["host_gap"],
            "start_ns": [first],
            "end_ns": [start],
            "dur_ns": [start - first],
            "self_ns": [start - first],
            "is_comm": [False],
            "lane": [HOST_LANE],
        }
    )


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the given ones."""
    if len(starts) == 0:
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > run_end[:-1]
    grp = np.cumsum(new) - 1
    us = s[new]
    ue = np.zeros(len(us), dtype=e.dtype)
    np.maximum.at(ue, grp, e)
    return us, ue


def _covered(a: np.ndarray, b: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Length of [a, b] covered by the disjoint sorted intervals (us, ue)."""
    if len(us) == 0:
        return np.zeros(len(a), np.int64)
    cum = np.concatenate([[0], np.cumsum(ue - us)])

    def upto(t: np.ndarray) -> np.ndarray:  # covered length before t
        k = np.searchsorted(us, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(k - 1, 0)]
        part = np.clip(t - us[np.maximum(k - 1, 0)], 0, (ue - us)[np.maximum(k - 1, 0)])
        return np.where(k > 0, full + part, 0)

    return upto(b) - upto(a)


def cpu_durations(trace: Trace, sel: pl.DataFrame) -> tuple[np.ndarray, int]:
    """Exclusive time of each selected CPU row, less (for annotations) the part of it that
    overlaps one of the rank's collectives: ``(durations, total dropped)``."""
    own = sel["self_ns"].fill_null(sel["dur_ns"]).to_numpy().astype(np.int64)
    comm = sel.filter("is_comm")
    ann = (sel["kind"] == "annotation").to_numpy() & ~sel["is_comm"].to_numpy()
    if comm.height == 0 or not ann.any():
        return np.maximum(own, 0), 0
    us, ue = _union(comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy())
    nodes = trace.nodes.filter(
        ~pl.col("on_gpu").fill_null(False) & pl.col("start_ns").is_not_null() & pl.col("dur_ns").is_not_null()
    )
    ov = _covered(nodes["start_ns"].to_numpy(), (nodes["start_ns"] + nodes["dur_ns"]).to_numpy(), us, ue)
    child = (
        nodes.select("parent", ov=pl.Series(ov))
        .filter(pl.col("parent").is_not_null())
        .group_by("parent")
        .agg(pl.col("ov").sum())
    )
    s = sel.select("id", "start_ns", "end_ns").join(
        child, left_on="id", right_on="parent", how="left", maintain_order="left"
    )
    total = _covered(s["start_ns"].to_numpy(), s["end_ns"].to_numpy(), us, ue)
    excl_ov = np.maximum(total - s["ov"].fill_null(0).to_numpy(), 0)
    cut = np.where(ann, np.minimum(excl_ov, np.maximum(own, 0)), 0)
    return np.maximum(own - cut, 0), int(cut.sum())


def lane_micros(lane: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """Durations in whole microseconds, rounded along each lane's running total (rows in lane
    order) so that a lane's microseconds add up to its nanoseconds, within one microsecond."""
    if len(lane) == 0:
        return np.zeros(0, np.int64)
    cum = np.cumsum(dur_ns)
    start_of_lane = np.r_[True, lane[1:] != lane[:-1]]
    base = np.maximum.accumulate(np.where(start_of_lane, cum - dur_ns, 0))
    c = cum - base
    hi = (c + 500) // 1000
    lo = (c - dur_ns + 500) // 1000
    return (hi - lo).astype(np.int64)


def _asof(
    left: pl.DataFrame, right: pl.DataFrame, on: tuple[str, str], by: list[str], strategy: str
) -> pl.DataFrame:
    return left.sort(on[0]).join_asof(
        right.sort(on[1]), left_on=on[0], right_on=on[1], by=by, strategy=strategy, **_ASOF_KW
    )


def edges(trace: Trace, classified: pl.DataFrame, sel: pl.DataFrame, mode: str) -> tuple[pl.DataFrame, int]:
    """Data dependencies (``dep_pos`` -> ``pos``) among the rows of ``sel`` (which has ``pos``,
    ``lane``, ``is_comm``, ``start_ns``, ``end_ns``); and how many ran backwards (dropped)."""
    parts: list[pl.DataFrame] = []
    E = {"dep_pos": pl.Int64, "pos": pl.Int64}
    base = sel.select("id", "pos", "lane", "is_comm", "start_ns", "end_ns")
    # lanes: each stream/thread, and the communication lane
    mem = pl.concat(
        [
            base.filter(pl.col("lane") != COMM_LANE),
            base.filter("is_comm").with_columns(lane=pl.lit(COMM_LANE, pl.Int64)),
        ]
    ).sort("lane", "pos")
    parts.append(mem.select(dep_pos=pl.col("pos").shift(1).over("lane"), pos="pos").drop_nulls().cast(E))
    lanes = mem.filter(pl.col("lane") != COMM_LANE).select("lane", "pos", "start_ns", "end_ns", "is_comm")
    comm = base.filter("is_comm")
    if comm.height and lanes.height:
        other = lanes.filter(~pl.col("is_comm")).select("lane").unique()
        cx = (
            comm.select("pos", "start_ns", "end_ns", own_lane="lane")
            .join(other, how="cross")
            .filter(pl.col("lane") != pl.col("own_lane"))
        )
        if cx.height:
            ln = lanes.filter(~pl.col("is_comm"))
            if mode == "cpu":  # issue: last that started before it on the lane
                iss = _asof(cx, ln.select("lane", _p="pos"), ("pos", "_p"), ["lane"], "backward")
            else:  # GPU stream: last that ended before it started
                iss = _asof(
                    cx, ln.select("lane", _p="pos", _e="end_ns"), ("start_ns", "_e"), ["lane"], "backward"
                )
            done = _asof(
                cx, ln.select("lane", _p="pos", _s="start_ns"), ("end_ns", "_s"), ["lane"], "forward"
            )
            parts += _floating(iss, done)
    gaps = base.filter(pl.col("lane") == HOST_LANE)
    if gaps.height:  # a host gap after what ended before it, before what started after it, on every stream
        streams = lanes.filter(pl.col("lane") != HOST_LANE)
        gx = gaps.select("pos", "start_ns", "end_ns").join(streams.select("lane").unique(), how="cross")
        iss = _asof(
            gx, streams.select("lane", _p="pos", _e="end_ns"), ("start_ns", "_e"), ["lane"], "backward"
        )
        done = _asof(
            gx, streams.select("lane", _p="pos", _s="start_ns"), ("end_ns", "_s"), ["lane"], "forward"
        )
        parts += _floating(iss, done)
    parts += _graph_edges(trace, classified, sel, mode)
    e = pl.concat(parts).unique()
    back = e.filter(pl.col("dep_pos") >= pl.col("pos"))
    e = e.filter(pl.col("dep_pos") < pl.col("pos"))
    # lane heads still without a dependency: the node that ended last before they started
    heads = base.join(e.select("pos").unique(), on="pos", how="anti")
    if heads.height > 1:
        order = np.argsort(base["end_ns"].to_numpy(), kind="stable")
        ends = base["end_ns"].to_numpy()[order]
        k = np.searchsorted(ends, heads["start_ns"].to_numpy(), side="right") - 1
        dep = np.where(k >= 0, base["pos"].to_numpy()[order][np.maximum(k, 0)], -1)
        h = pl.DataFrame({"dep_pos": dep, "pos": heads["pos"].to_numpy()}).cast(E)
        e = pl.concat([e, h.filter((pl.col("dep_pos") >= 0) & (pl.col("dep_pos") < pl.col("pos")))])
    return e.unique().sort("pos", "dep_pos"), back.height


def _floating(iss: pl.DataFrame, done: pl.DataFrame) -> list[pl.DataFrame]:
    """Edges between a chained lane of "floating" nodes (collectives, host gaps; ``pos``) and
    other lanes' nodes (``_p``): a node before several floating ones needs an edge only to the
    first of them, a node after several only from the last (the chain carries the rest)."""
    E = {"dep_pos": pl.Int64, "pos": pl.Int64}
    a = iss.drop_nulls("_p").group_by("_p").agg(pl.col("pos").min()).select(dep_pos="_p", pos="pos")
    b = done.drop_nulls("_p").group_by("_p").agg(pl.col("pos").max()).select(dep_pos="pos", pos="_p")
    return [a.cast(E), b.cast(E)]


def _graph_edges(trace: Trace, classified: pl.DataFrame, sel: pl.DataFrame, mode: str) -> list[pl.DataFrame]:
    """Cross-lane edges from the execution graph: sync -> launch (GPU runs), GPU-to-GPU sync,
    and data edges between exported nodes."""
    E = {"dep_pos": pl.Int64, "pos": pl.Int64}
    deps = execution_deps(trace, classified)
    pos = sel.select("id", "pos", "lane")
    out: list[pl.DataFrame] = []
    # "node (its start, or its end) after dep's end" between exported nodes of different lanes;
    # a constraint on a node's end holds for what its lane runs after the dep ended
    x = (
        deps.filter(pl.col("kind").is_in(["sync", "data"]) & pl.col("dep_end"))
        .join(pos, left_on="node", right_on="id")
        .join(sel.select("id", dep_pos="pos", dep_lane="lane", t="end_ns"), left_on="dep", right_on="id")
        .filter((pl.col("lane") != pl.col("dep_lane")) & (pl.col("lane") != COMM_LANE))
    )
    out.append(x.filter(~pl.col("node_end")).select("dep_pos", "pos").cast(E))
    at_end = x.filter("node_end").select("dep_pos", "lane", "t")
    if at_end.height:
        members = sel.filter(pl.col("lane") != COMM_LANE).select("lane", _p="pos", _s="start_ns")
        nxt = _asof(at_end, members, ("t", "_s"), ["lane"], "forward")
        out.append(nxt.select("dep_pos", pos="_p").drop_nulls().cast(E))
    if mode != "gpu":
        return out
    nodes = trace.nodes.select("id", "tid", "start_ns", end_ns=pl.col("start_ns") + pl.col("dur_ns"))
    # synchronising CPU calls: (thread, end) -> the exported GPU op they waited for
    syncs = (
        deps.filter(pl.col("kind") == "sync")
        .join(nodes, left_on="node", right_on="id")
        .filter(pl.col("tid").is_not_null())
        .join(pos.select("id", j_pos="pos", ylane="lane"), left_on="dep", right_on="id")
        .select("tid", "ylane", t="end_ns", j_pos="j_pos")
        .drop_nulls()
        .sort("tid", "ylane", "t")
        .with_columns(pl.col("j_pos").cum_max().over("tid", "ylane"))
    )
    if syncs.height == 0:
        return out
    launches = (
        deps.filter(pl.col("kind") == "launch")
        .join(pos, left_on="node", right_on="id")
        .join(nodes.select("id", "tid", t="start_ns"), left_on="dep", right_on="id")
        .select("pos", "lane", "tid", "t")
        .drop_nulls()
        .join(syncs.select("tid", "ylane").unique(), on="tid")
        .filter(pl.col("ylane") != pl.col("lane"))
    )
    if launches.height == 0:
        return out
    hit = _asof(launches, syncs, ("t", "t"), ["tid", "ylane"], "backward").drop_nulls("j_pos")
    # the first op of a lane to learn of a given GPU op is enough (the lane chain carries it on)
    hit = hit.group_by("lane", "j_pos").agg(pl.col("pos").min())
    out.append(hit.select(dep_pos="j_pos", pos="pos").cast(E))
    return out
