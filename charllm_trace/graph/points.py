"""The execution graph of one rank as time points: every node is two points (start, end).

Each CPU thread and each GPU stream is a *lane*: its points in execution order form a
chain (on a CPU thread, the Euler tour of the call tree: a parent's start, its
children's points, its end). Consecutive points on a lane are joined by an edge whose
lag is the measured time between them; GPU streams are joined end -> next start with
no fixed lag (the gap is whatever the other dependencies make it). Cross-lane edges:
``launch`` (runtime call start -> GPU op start), ``sync`` (GPU op end -> end of the CPU
call that waited for it), ``data`` (tensor producer end -> consumer start) and, across
ranks, ``collective`` (see :mod:`charllm_trace.graph.run`).

*Calibration* (timestamps known): each edge's lag is its model lag clipped to the
measured gap, so no edge says a point could be earlier than measured; a point whose
measured time no edge explains gets the unexplained part as a *fixed* lag on its lane
edge (a wait the trace does not show: a cross-stream event, a lock, a peer). Replaying
the calibrated graph with every scale factor 1.0 gives back the measured times exactly;
the fixed part never scales. Without timestamps the lags are the recorded durations
(exclusive time on CPU) and lanes follow node ids (``--simulate``).

Everything here is numpy over arrays of points and edges; no per-node Python loop.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.core.classify import classify
from charllm_trace.core.model import Trace
from charllm_trace.graph.calibrate import append_edges, calibrate
from charllm_trace.graph.classes import cpu_subtree_classes, node_classes
from charllm_trace.graph.cuda_sync import cuda_sync_edges, sync_notes
from charllm_trace.graph.inferred import kick_edges, wake_edges
from charllm_trace.graph.lanes import (
    dense_codes,
    depth_of,
    make_monotone,
    pos_of,
    self_durations,
    subtree_last,
    time_parents,
)
from charllm_trace.graph.point_edges import (
    EdgeBlocks,
    PointRows,
    active_col,
    data_edges,
    launch_edges,
    sync_edges,
)
from charllm_trace.graph.pointgraph import (  # noqa: F401 - the vocabulary, re-exported for callers
    CAT,
    CATEGORIES,
    EDGE_KINDS,
    EK,
    KICK_NS,
    PRIO_CROSS,
    PRIO_LANE,
    PRIO_WAKE,
    SYNC_CALL_RE,
    WAKE_FRAC,
    WAKE_GAP_NS,
    WAKE_NS,
    WC,
    WHATIF_ALIASES,
    WHATIF_CLASSES,
    PointGraph,
)


def build(trace: Trace, classified: pl.DataFrame | None = None, *, calibrated: bool = True) -> PointGraph:
    """The point graph of one rank: calibrated on measured times (unless ``calibrated`` is
    False: the caller adds edges first), or from recorded order and durations when the trace
    has no timestamps."""
    notes: list[str] = []
    r, dur, depth, tour, cpu_work = _point_rows(trace, classified, notes)
    n, measured = r.n, r.measured
    pre, last, chain, chain_lane = _lane_chains(r, depth, tour, cpu_work)
    del tour, cpu_work
    ptime = np.empty(2 * n, dtype=np.int64)
    ptime[0::2] = r.start
    ptime[1::2] = r.end
    edges = EdgeBlocks()
    a, b, kind = _lane_edges(edges, r, chain, chain_lane, ptime, dur, depth)
    del dur, depth
    gk = np.flatnonzero(r.gpu)
    # the trace's cuda_sync records (read once: the launch latency leaves out the ops that waited
    # for an event, the sync edges use them)
    sync_tally: dict[str, int] = {}
    cs = cuda_sync_edges(r.nodes, sync_tally) if measured and len(gk) else None
    notes.extend(sync_notes(sync_tally))
    launcher, gl = launch_edges(edges, r, cs, chain, chain_lane, notes)
    sync_fix = None
    if measured and len(gk):
        assert cs is not None
        sync_fix = sync_edges(edges, r, cs, gk, gl, launcher)
    if measured:  # wake-ups: a thread that resumes right after another thread's op ends waited for it
        wk = wake_edges(a, b, ptime, r.gpu, r.lane, r.pid, kind, EK)
        if wk is not None:
            w_src, w_dst, w_lag, lane_edge, lane_base_new = wk
            edges.base[0][lane_edge] = lane_base_new
            edges.add(w_src, w_dst, w_lag, EK["wake"], CAT["sync_wait"], -1, -1, PRIO_WAKE)
    data_edges(edges, r, trace.deps, notes)
    # the lane temporaries go first, then each list as soon as it is one array (peak memory)
    first_pts = chain[np.r_[True, chain_lane[1:] != chain_lane[:-1]]] if len(chain) else chain
    del a, b, kind, chain, chain_lane
    g = _point_graph(trace, r, edges, ptime, pre, last, launcher, notes)
    if sync_fix is not None:
        _sync_own_time(g, *sync_fix)
    _lane_roots(g, r, first_pts, ptime)
    if measured and calibrated:
        calibrate(g)
    return g


def _active_rows(trace: Trace, classified: pl.DataFrame | None) -> tuple[pl.DataFrame, bool, np.ndarray]:
    """The classified nodes, whether the trace has times, and the rows that are graph nodes."""
    nodes = classified if classified is not None and "cls" in classified.columns else classify(trace.nodes)
    measured = bool(trace.meta.has_timestamps) and nodes["start_ns"].null_count() < nodes.height
    kind_all = nodes["kind"].fill_null("other")
    # GPU ranges and CUDA sync records (kind "sync": cuda_sync_edges reads them) are not activity;
    active = (~kind_all.is_in(["gpu_annotation", "sync"])).to_numpy()
    # Python stack frames (Kineto ``python_function`` events, recorded with ``with_stack``) are not
    # ops: their time belongs to the op around them (as in HTA), and ``sanitize`` removes them
    py = nodes["attrs"].str.contains('"cat":"python_function', literal=True).fill_null(False).to_numpy()
    if py.any():
        active &= ~py
    if measured:
        active &= (nodes["start_ns"].is_not_null() & nodes["dur_ns"].is_not_null()).to_numpy()
    return nodes, measured, np.flatnonzero(active)


def _point_rows(
    trace: Trace, classified: pl.DataFrame | None, notes: list[str]
) -> tuple[PointRows, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The active nodes' columns, with their lanes and call tree; also their durations, depth in
    the tree, order key on the lane and CPU-work flags (used once, by the lanes)."""
    nodes, measured, rows = _active_rows(trace, classified)
    # name-based flags on the full frame (per distinct name), then only numeric columns are gathered
    wc, cat, runtime, sync_call, cpu_work = (x[rows] for x in node_classes(nodes))
    sub = len(rows) < nodes.height

    def col(name: str, fill: int | bool) -> np.ndarray:  # one numeric column of the active rows
        return active_col(nodes, rows, sub, name, fill)

    n = len(rows)
    ids = col("id", -1).astype(np.int64)
    gpu = col("on_gpu", False).astype(bool)
    dur = col("dur_ns", 0).astype(np.int64)
    neg = int((dur < 0).sum())
    dur = np.maximum(dur, 0)
    if neg:
        notes.append(f"{neg} nodes with a negative duration were taken as 0")
    start = col("start_ns", 0).astype(np.int64) if measured else np.zeros(n, dtype=np.int64)
    ppos = pos_of(ids, col("parent", -1).astype(np.int64))
    ppos[gpu] = -1
    ppos[(ppos >= 0) & gpu[np.maximum(ppos, 0)]] = -1
    pid = col("pid", -1)
    lane = _lanes(col, gpu, pid)
    r = PointRows(nodes, rows, sub, measured, ids, gpu, start, start + dur, ppos, pid, lane, wc, cat, runtime, sync_call)
    depth, tour = _call_trees(trace, r, dur, notes)
    return r, dur, depth, tour, cpu_work


def _lanes(col, gpu: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Each node's lane: its CPU thread, or its GPU stream (a GPU node without a stream, as in
    Chakra ETs, runs on a lane named by its tid)."""
    tid = col("tid", -1)
    dev = col("device", -1).astype(np.int64)
    stream = col("stream", -1)
    g_lane_a = np.where(dev >= 0, dev, pid)
    g_lane_b = np.where(stream >= 0, stream, tid)
    return dense_codes(gpu.astype(np.int64), np.where(gpu, g_lane_a, pid), np.where(gpu, g_lane_b, tid))


def _call_trees(
    trace: Trace, r: PointRows, dur: np.ndarray, notes: list[str]
) -> tuple[np.ndarray, np.ndarray | tuple[np.ndarray, np.ndarray]]:
    """The call tree on each lane (``r.ppos``; with times also ``r.start``/``r.end`` made to nest):
    returns each node's depth and either its order key on the lane or, with times, the lanes'
    tour already made (pre-order index, last of subtree: ``make_monotone`` sorts by the same keys)."""
    if r.measured:
        # the call tree on each thread from time nesting (the ``parent`` column may come from a host
        # execution trace whose parent runs on another thread): the Euler tour of a lane must be
        # time-ordered for its edges to be the measured gaps
        r.ppos = time_parents(r.start, r.end, r.lane, r.gpu)
        depth = depth_of(r.ppos)
        r.start, r.end, clipped, pre, last = make_monotone(r.start, r.end, r.ppos, depth, r.lane, r.ids)
        if clipped:
            notes.append(
                f"{clipped} ops overlap a neighbour or outlast their parent on their thread or stream; "
                "their end was cut for the graph (times that contradict nesting)"
            )
        return depth, (pre, last)  # make_monotone changes no parent: the depths stand
    # nesting only within a lane
    ppos = r.ppos
    same_lane = np.where(ppos >= 0, r.lane[np.maximum(ppos, 0)] == r.lane, False)
    cross_parent = int(((ppos >= 0) & ~same_lane).sum())
    ppos[~same_lane] = -1
    if cross_parent:
        notes.append(f"{cross_parent} nodes whose parent runs on another thread were taken as top-level")
    depth = depth_of(ppos)
    return depth, _recorded_order(trace, r.ids, ppos, dur, notes)


def _lane_chains(
    r: PointRows, depth: np.ndarray, key: np.ndarray | tuple[np.ndarray, np.ndarray], cpu_work: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Lanes: the Euler tour of each CPU call tree, kernels in order on each GPU stream. Returns
    each node's pre-order index and that of its subtree's last node, and the points (2*i start,
    2*i+1 end) in chain order with their lanes. Sets the what-if classes of CPU subtrees."""
    n = r.n
    if isinstance(key, tuple):  # the tour made with the call trees (measured times)
        pre, last = key
    else:
        order = np.lexsort((r.ids, depth, key, r.lane))  # pre-order within each lane
        pre = np.empty(n, dtype=np.int64)
        pre[order] = np.arange(n)
        del order
        last = subtree_last(pre, r.ppos, depth)  # pre-order index of the last node of each subtree
    r.wc = cpu_subtree_classes(r.wc, cpu_work, pre, last, r.gpu)  # CPU-only ranks: aten::mm ... are work
    # points: 2*i start, 2*i+1 end; sort key (lane, slot, is_end, -depth)
    # point indexes and lanes in int32 (< 2**31, as in the graph): the chain, the lane edges and
    # their sources and destinations are the largest arrays alive while the edges are built
    pts = np.concatenate([np.arange(0, 2 * n, 2, dtype=np.int32), np.arange(1, 2 * n, 2, dtype=np.int32)])
    slot = np.concatenate([pre, last])
    is_end = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)])
    dkey = np.concatenate([np.zeros(n, np.int64), -depth])
    plane = np.concatenate([r.lane, r.lane])
    maxd = int(depth.max()) if n else 0
    k2 = is_end * (maxd + 1) + (dkey + maxd)  # starts first, then ends deepest first
    if float(n + 1) * (n + 1) * (2 * maxd + 2) < 2**62:
        porder = np.argsort((plane * (n + 1) + slot) * (2 * maxd + 2) + k2, kind="stable")
    else:  # pragma: no cover - only for absurd depths
        porder = np.lexsort((k2, slot, plane))
    return pre, last, pts[porder], plane[porder].astype(np.int32)


def _lane_edges(
    edges: EdgeBlocks,
    r: PointRows,
    chain: np.ndarray,
    chain_lane: np.ndarray,
    ptime: np.ndarray,
    dur: np.ndarray,
    depth: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges between consecutive points of each lane (the first block of ``edges``); returns
    their source and destination points and kinds (the wake-up edges read them)."""
    selfdur = self_durations(dur, r.ppos, r.gpu)
    same = chain_lane[1:] == chain_lane[:-1]
    a, b = chain[:-1][same], chain[1:][same]
    ia, ib = a // 2, b // 2
    a_end, b_end = (a % 2) == 1, (b % 2) == 1
    lane_gpu = r.gpu[ia]
    gpu_gap = lane_gpu & (ia != ib)
    # owner of the time between a and b: the innermost open node
    own = np.where(~a_end, ia, r.ppos[ia])
    own = np.where(lane_gpu, np.where(~a_end, ia, -1), own)
    kind = np.full(len(a), EK["thread_order"], dtype=np.int8)
    kind[(ia == ib)] = EK["span"]
    kind[(~a_end) & b_end & (ia != ib)] = EK["nesting"]  # last child... (start->end of another: n/a)
    kind[(~a_end) & (~b_end)] = EK["nesting"]  # parent start -> first child start
    kind[a_end & b_end & (ia != ib)] = EK["nesting"]  # last child end -> parent end
    kind[gpu_gap] = EK["stream_order"]
    if r.measured:
        lane_base = ptime[b] - ptime[a]
    else:
        # recorded order: a node's own (exclusive) time sits right after its start
        lane_base = np.where(~a_end, selfdur[ia], 0)
    lane_base = np.where(gpu_gap, 0, lane_base)  # GPU gaps: no fixed lag
    ecat = np.where(own >= 0, r.cat[np.maximum(own, 0)], CAT["idle"]).astype(np.int8)
    ewc = np.where(own >= 0, r.wc[np.maximum(own, 0)], WC["idle"]).astype(np.int8)
    ecat = np.where(gpu_gap, CAT["sync_wait"], ecat).astype(np.int8)
    ewc = np.where(gpu_gap, -1, ewc).astype(np.int8)
    edges.add_block(a, b, lane_base, kind, ecat, ewc, own.astype(np.int32), np.full(len(a), PRIO_LANE, np.int8))
    return a, b, kind


def _point_graph(
    trace: Trace,
    r: PointRows,
    edges: EdgeBlocks,
    ptime: np.ndarray,
    pre: np.ndarray,
    last: np.ndarray,
    launcher: np.ndarray,
    notes: list[str],
) -> PointGraph:
    """The graph with its edge blocks joined (each list freed as soon as it is one array)."""

    def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        out = np.concatenate(parts).astype(dtype, copy=False)
        parts.clear()
        return out

    n = r.n
    src = joined(edges.src, np.int32)  # point indexes (< 2**31): half the memory of int64
    dst = joined(edges.dst, np.int32)
    base = joined(edges.base, np.int64)
    wclass_a, kind_a, cat_a = joined(edges.wc, np.int8), joined(edges.kind, np.int8), joined(edges.cat, np.int8)
    owner_a, prio_a = joined(edges.own, np.int32), joined(edges.prio, np.int8)
    return PointGraph(
        n_points=2 * n,
        time=ptime,
        root=np.full(2 * n, np.iinfo(np.int64).min, dtype=np.int64),
        src=src,
        dst=dst,
        base=base,
        fixed=np.zeros(len(src), dtype=np.int64),
        wclass=wclass_a,
        kind=kind_a,
        cat=cat_a,
        owner=owner_a,
        prio=prio_a,
        rows=r.rows,
        ids=r.ids,
        rank=trace.meta.rank,
        notes=notes,
        measured=r.measured,
        lane=r.lane.astype(np.int32),  # kept with the graph: int32 (node counts < 2**31)
        pre=pre.astype(np.int32),
        last=last.astype(np.int32),
        launcher=launcher.astype(np.int32),
    )


def _sync_own_time(g: PointGraph, srow: np.ndarray, own_t: np.ndarray) -> None:
    """A call that waited: its own time is what is left after the wait (the wait is the GPU's)."""
    span_e = (g.kind == EK["span"]) & np.isin(g.dst, 2 * srow + 1)
    pos_in = np.searchsorted(2 * srow + 1, g.dst[span_e])  # srow is sorted (np.unique)
    g.base[span_e] = np.minimum(g.base[span_e], own_t[pos_in])


def _lane_roots(g: PointGraph, r: PointRows, first_pts: np.ndarray, ptime: np.ndarray) -> None:
    """The first point of every lane starts no earlier than it did (or at 0: recorded order).
    A GPU stream's first op has its launch (or a wait) before it: it is held at its measured time
    only when nothing comes before it (CPU threads start when they started; without timestamps
    every lane starts at 0)."""
    if r.measured:
        kick = kick_edges(first_pts, ptime, r.gpu, r.lane, r.pid)
        if kick is not None:
            k_src, k_dst = kick
            append_edges(
                g, k_src, k_dst, ptime[k_dst] - ptime[k_src], EK["wake"], CAT["sync_wait"], PRIO_WAKE
            )
        has_in = np.zeros(g.n_points, dtype=bool)
        has_in[g.dst] = True
        first_pts = first_pts[~has_in[first_pts]]
    g.root[first_pts] = ptime[first_pts] if r.measured else 0


def _recorded_order(
    trace: Trace, ids: np.ndarray, ppos: np.ndarray, dur: np.ndarray, notes: list[str]
) -> np.ndarray:
    """Without timestamps: the order of the nodes on their lanes, consistent with the recorded
    dependencies.

    Chakra and PyTorch number nodes in issue order, so the order is the ids' wherever the
    recorded dependencies (and nesting: a child after its parent) allow it: among the nodes whose
    dependencies are all placed, the lowest id goes first (the list schedule the old simulator
    used). A lane chained by raw id could otherwise contradict a dependency and close a cycle.
    Dependencies on a cycle among themselves do not constrain the order (``graph.run`` leaves
    them out of the graph, with a note)."""
    from charllm_trace.core import dag as engine

    n = len(ids)
    dd = trace.deps
    dn = pos_of(ids, dd["node"].to_numpy().astype(np.int64)) if dd.height else np.zeros(0, np.int64)
    dp = pos_of(ids, dd["dep"].to_numpy().astype(np.int64)) if dd.height else np.zeros(0, np.int64)
    ok = (dn >= 0) & (dp >= 0) & (dn != dp)
    kids = np.flatnonzero(ppos >= 0)
    src = np.concatenate([dp[ok], ppos[kids]]).astype(np.int32)
    dst = np.concatenate([dn[ok], kids]).astype(np.int32)
    order, placed = engine.topo_order(n, src, dst, ids)
    if placed < n:  # cycles among the recorded dependencies: order without the edges on them
        zero = np.zeros(n, np.int64)
        lag0 = np.zeros(len(src), np.int64)
        prio = np.zeros(len(src), np.int8)
        fwd, _, _ = engine.longest_path(n, src, dst, lag0, prio, zero)
        bwd, _, _ = engine.longest_path(n, dst, src, lag0, prio, zero)
        stuck = (fwd == engine.NONE) & (bwd == engine.NONE)
        keep = ~(stuck[src] & stuck[dst])
        order, placed = engine.topo_order(n, src[keep], dst[keep], ids)
        if placed < n:  # pragma: no cover - what remains is not a cycle of recorded edges
            rest = np.setdiff1d(np.arange(n), order)
            order = np.concatenate([order, rest[np.argsort(ids[rest], kind="stable")]])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank
