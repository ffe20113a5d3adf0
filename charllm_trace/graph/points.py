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

from charllm_trace.core.classify import classify, launch_calls
from charllm_trace.core.model import Trace
from charllm_trace.graph.calibrate import append_edges, calibrate
from charllm_trace.graph.classes import cpu_subtree_classes, early_launch_notes, node_classes
from charllm_trace.graph.cuda_sync import cuda_sync_edges, sync_notes
from charllm_trace.graph.inferred import kick_edges, launch_model, wake_edges
from charllm_trace.graph.lanes import (
    dense_codes,
    depth_of,
    make_monotone,
    pos_of,
    self_durations,
    subtree_last,
    time_parents,
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
from charllm_trace.graph.sync_waits import launched_before_edges, per_call_min, sync_kinds


def build(trace: Trace, classified: pl.DataFrame | None = None, *, calibrated: bool = True) -> PointGraph:
    """The point graph of one rank: calibrated on measured times (unless ``calibrated`` is
    False: the caller adds edges first), or from recorded order and durations when the trace
    has no timestamps."""
    nodes = classified if classified is not None and "cls" in classified.columns else classify(trace.nodes)
    measured = bool(trace.meta.has_timestamps) and nodes["start_ns"].null_count() < nodes.height
    notes: list[str] = []
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
    rows = np.flatnonzero(active)
    # name-based flags on the full frame (per distinct name), then only numeric columns are gathered
    wc, cat, runtime, sync_call, cpu_work = (x[rows] for x in node_classes(nodes))
    sub = len(rows) < nodes.height

    def col(name: str, fill: int | bool) -> np.ndarray:  # one numeric column of the active rows
        a = nodes[name].fill_null(fill).to_numpy()
        return a[rows] if sub else a

    n = len(rows)
    ids = col("id", -1).astype(np.int64)
    gpu = col("on_gpu", False).astype(bool)
    dur = col("dur_ns", 0).astype(np.int64)
    neg = int((dur < 0).sum())
    dur = np.maximum(dur, 0)
    if neg:
        notes.append(f"{neg} nodes with a negative duration were taken as 0")
    if measured:
        start = col("start_ns", 0).astype(np.int64)
    else:
        start = np.zeros(n, dtype=np.int64)
    end = start + dur
    parent_ids = col("parent", -1).astype(np.int64)
    ppos = pos_of(ids, parent_ids)
    ppos[gpu] = -1
    ppos[(ppos >= 0) & gpu[np.maximum(ppos, 0)]] = -1
    pid = col("pid", -1)
    tid = col("tid", -1)
    dev = col("device", -1).astype(np.int64)
    stream = col("stream", -1)
    # a GPU node without a stream (Chakra ETs) runs on a lane named by its tid
    g_lane_a = np.where(dev >= 0, dev, pid)
    g_lane_b = np.where(stream >= 0, stream, tid)
    lane = dense_codes(gpu.astype(np.int64), np.where(gpu, g_lane_a, pid), np.where(gpu, g_lane_b, tid))
    del tid, dev, stream, g_lane_a, g_lane_b  # (peak memory: node-sized temporaries go early)
    clipped = 0
    if measured:
        # the call tree on each thread from time nesting (the ``parent`` column may come from a host
        # execution trace whose parent runs on another thread): the Euler tour of a lane must be
        # time-ordered for its edges to be the measured gaps
        ppos = time_parents(start, end, lane, gpu)
        depth = depth_of(ppos)
        start, end, clipped = make_monotone(start, end, ppos, depth, lane, ids)
        if clipped:
            notes.append(
                f"{clipped} ops overlap a neighbour or outlast their parent on their thread or stream; "
                "their end was cut for the graph (times that contradict nesting)"
            )
        depth = depth_of(ppos)
        key = start
        del parent_ids
    else:
        # nesting only within a lane
        same_lane = np.where(ppos >= 0, lane[np.maximum(ppos, 0)] == lane, False)
        cross_parent = int(((ppos >= 0) & ~same_lane).sum())
        ppos[~same_lane] = -1
        if cross_parent:
            notes.append(f"{cross_parent} nodes whose parent runs on another thread were taken as top-level")
        depth = depth_of(ppos)
        key = _recorded_order(trace, ids, ppos, dur, notes)
    selfdur = self_durations(dur, ppos, gpu)

    # ---- lanes: Euler tour of each CPU call tree, kernels in order on each GPU stream ----
    order = np.lexsort((ids, depth, key, lane))  # pre-order within each lane
    pre = np.empty(n, dtype=np.int64)
    pre[order] = np.arange(n)
    del order, key
    last = subtree_last(pre, ppos, depth)  # pre-order index of the last node of each subtree
    wc = cpu_subtree_classes(wc, cpu_work, pre, last, gpu)  # CPU-only ranks: aten::mm ... are work
    del cpu_work
    # points: 2*i start, 2*i+1 end; sort key (lane, slot, is_end, -depth)
    pts = np.concatenate([2 * np.arange(n), 2 * np.arange(n) + 1])
    slot = np.concatenate([pre, last])
    is_end = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)])
    dkey = np.concatenate([np.zeros(n, np.int64), -depth])
    plane = np.concatenate([lane, lane])
    maxd = int(depth.max()) if n else 0
    k2 = is_end * (maxd + 1) + (dkey + maxd)  # starts first, then ends deepest first
    if float(n + 1) * (n + 1) * (2 * maxd + 2) < 2**62:
        porder = np.argsort((plane * (n + 1) + slot) * (2 * maxd + 2) + k2, kind="stable")
    else:  # pragma: no cover - only for absurd depths
        porder = np.lexsort((k2, slot, plane))
    chain = pts[porder]
    chain_lane = plane[porder]
    del pts, slot, is_end, dkey, plane, porder, k2
    same = chain_lane[1:] == chain_lane[:-1]
    a, b = chain[:-1][same], chain[1:][same]

    ptime = np.empty(2 * n, dtype=np.int64)
    ptime[0::2] = start
    ptime[1::2] = end
    ia, ib = a // 2, b // 2
    a_end, b_end = (a % 2) == 1, (b % 2) == 1
    lane_gpu = gpu[ia]
    # owner of the time between a and b: the innermost open node
    own = np.where(~a_end, ia, ppos[ia])
    own = np.where(lane_gpu, np.where(~a_end, ia, -1), own)
    kind = np.full(len(a), EK["thread_order"], dtype=np.int8)
    kind[(ia == ib)] = EK["span"]
    kind[(~a_end) & b_end & (ia != ib)] = EK["nesting"]  # last child... (start->end of another: n/a)
    kind[(~a_end) & (~b_end)] = EK["nesting"]  # parent start -> first child start
    kind[a_end & b_end & (ia != ib)] = EK["nesting"]  # last child end -> parent end
    kind[lane_gpu & (ia != ib)] = EK["stream_order"]
    if measured:
        lane_base = ptime[b] - ptime[a]
        lane_base = np.where(lane_gpu & (ia != ib), 0, lane_base)  # GPU gaps: no fixed lag
    else:
        # recorded order: a node's own (exclusive) time sits right after its start
        lane_base = np.where(~a_end, selfdur[ia], 0)
        lane_base = np.where(lane_gpu & (ia != ib), 0, lane_base)
    ecat = np.where(own >= 0, cat[np.maximum(own, 0)], CAT["idle"]).astype(np.int8)
    ewc = np.where(own >= 0, wc[np.maximum(own, 0)], WC["idle"]).astype(np.int8)
    ecat = np.where(lane_gpu & (ia != ib), CAT["sync_wait"], ecat).astype(np.int8)
    ewc = np.where(lane_gpu & (ia != ib), -1, ewc).astype(np.int8)
    del selfdur, depth, a_end, b_end

    E_src = [a]
    E_dst = [b]
    E_base = [lane_base]
    E_kind = [kind]
    E_cat = [ecat]
    E_wc = [ewc]
    E_own = [own]
    E_prio = [np.full(len(a), PRIO_LANE, np.int8)]

    def add_edges(src, dst, base, kind: int, cat: int, wc: int, own, prio: int) -> None:
        """Append a block of cross edges (``own``: the owner row of each, or one for all)."""
        m = len(src)
        E_src.append(src)
        E_dst.append(dst)
        E_base.append(base)
        E_kind.append(np.full(m, kind, np.int8))
        E_cat.append(np.full(m, cat, np.int8))
        E_wc.append(np.full(m, wc, np.int8))
        E_own.append(own if isinstance(own, np.ndarray) else np.full(m, own, np.int64))
        E_prio.append(np.full(m, prio, np.int8))

    # ---- launch: runtime call start -> GPU op start ----
    gk = np.flatnonzero(gpu)
    # the trace's cuda_sync records (read once: the launch latency leaves out the ops that waited
    # for an event, the sync edges below use them)
    sync_tally: dict[str, int] = {}
    cs = cuda_sync_edges(nodes, sync_tally) if measured and len(gk) else None
    notes.extend(sync_notes(sync_tally))
    launcher = launch_calls(ids, gpu, runtime, col("correlation", -1), col("launch_id", -1))
    gl = np.flatnonzero(gpu & (launcher >= 0))
    if len(gl):
        r = launcher[gl]
        if measured:
            delta = start[gl] - start[r]
            waited = np.zeros(n, dtype=bool)  # GPU ops whose start waited for an event
            if cs is not None and cs.height:
                w_ids = cs.filter(~pl.col("dst_end"))["dst"].to_numpy().astype(np.int64)
                w_pos = pos_of(ids, w_ids)
                waited[w_pos[w_pos >= 0]] = True
            model = launch_model(
                delta, start, end, gl, chain, chain_lane, gpu, n, end[r] - start[r], waited[gl]
            )
        else:
            model = np.zeros(len(gl), dtype=np.int64)
        add_edges(2 * r, 2 * gl, model, EK["launch"], CAT["launch"], WC["launch"], r, PRIO_CROSS)
    if measured and len(gl):  # contradicting edges: counted (calibrate keeps them as fixed lags)
        notes.extend(early_launch_notes(start[gl] - start[launcher[gl]]))

    # ---- sync: GPU op end -> end of the CPU call that waited for it ----
    sync_fix: tuple[np.ndarray, np.ndarray] | None = None
    fix_rows: list[np.ndarray] = []
    fix_own: list[np.ndarray] = []
    exact_calls = np.zeros(0, dtype=np.int64)

    def sync_edges(srow: np.ndarray, grow: np.ndarray) -> None:
        """Sync edges: the waited GPU op's end -> the end of the CPU call that waited for it (the
        call's own time: from the later of its start and the op's end, the least over the ops one
        call waits for, so only the op that ended last binds it; kept for the fix below)."""
        own_t = per_call_min(srow, end[srow] - np.maximum(start[srow], end[grow]))
        add_edges(2 * grow + 1, 2 * srow + 1, own_t, EK["sync"], CAT["sync_wait"], -1, srow, PRIO_CROSS)
        fix_rows.append(srow)
        fix_own.append(own_t)

    if measured and len(gk):
        # exact edges from the trace's cuda_sync records, where it has them
        assert cs is not None
        if cs.height:
            sp = pos_of(ids, cs["src"].to_numpy().astype(np.int64))
            dp = pos_of(ids, cs["dst"].to_numpy().astype(np.int64))
            ok = (sp >= 0) & (dp >= 0)
            sp, dp, to_end = sp[ok], dp[ok], cs["dst_end"].to_numpy()[ok]
            # stream wait event: recorded op end -> start of the op that waited (no lag of its own)
            gs, gd = sp[~to_end], dp[~to_end]
            if len(gs):
                add_edges(
                    2 * gs + 1,
                    2 * gd,
                    np.zeros(len(gs), np.int64),
                    EK["sync"],
                    CAT["sync_wait"],
                    -1,
                    -1,
                    PRIO_CROSS,
                )
            # event / stream / context sync: waited op end -> end of the runtime call
            srow, grow = dp[to_end], sp[to_end]
            if len(srow):
                sync_edges(srow, grow)
                exact_calls = np.unique(srow)
        # the heuristic for the other synchronising calls: the GPU op that ended last inside them
        sync_rows = np.flatnonzero(runtime & sync_call)
        sync_rows = sync_rows[~np.isin(sync_rows, exact_calls)]
        # device and stream synchronizes: the ops launched before them (sync_waits), not timing
        is_dev, is_str = sync_kinds(nodes["name"].gather(rows[sync_rows] if sub else sync_rows))
        by_order = is_dev | is_str
        srow, grow = launched_before_edges(
            sync_rows[by_order], is_dev[by_order], start, end, lane, gl, launcher
        )
        if len(srow):
            sync_edges(srow, grow)
            sync_rows = sync_rows[~np.isin(sync_rows, srow)]
        if len(sync_rows):
            g_order = gk[np.argsort(end[gk], kind="stable")]
            g_end = end[g_order]
            k = np.searchsorted(g_end, end[sync_rows], side="right") - 1
            ok = k >= 0
            k = np.maximum(k, 0)
            ok &= g_end[k] > start[sync_rows]
            srow, grow = sync_rows[ok], g_order[k[ok]]
            if len(srow):
                sync_edges(srow, grow)
        if fix_rows:
            # one own time per call (a context sync waits for several ops: the least is left)
            rows_all, own_all = np.concatenate(fix_rows), np.concatenate(fix_own)
            u, inv = np.unique(rows_all, return_inverse=True)
            own_min = np.full(len(u), np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(own_min, inv, own_all)
            sync_fix = (u, own_min)

    # ---- wake-ups: a thread that resumes right after another thread's op ends waited for it ----
    if measured:
        wk = wake_edges(a, b, ptime, gpu, lane, pid, kind, EK)
        if wk is not None:
            w_src, w_dst, w_lag, lane_edge, lane_base_new = wk
            E_base[0][lane_edge] = lane_base_new
            add_edges(w_src, w_dst, w_lag, EK["wake"], CAT["sync_wait"], -1, -1, PRIO_WAKE)

    # ---- data: tensor producer end -> consumer start (host execution trace) ----
    dd = trace.deps
    extra_deps = dd.filter(pl.col("kind") == "data") if measured else dd
    if extra_deps.height:
        dn = pos_of(ids, extra_deps["node"].to_numpy().astype(np.int64))
        dp = pos_of(ids, extra_deps["dep"].to_numpy().astype(np.int64))
        missing = (dn < 0) | (dp < 0)
        if missing.any():
            all_ids = nodes["id"].to_numpy()
            dangling = ~np.isin(extra_deps["node"].to_numpy(), all_ids) | ~np.isin(
                extra_deps["dep"].to_numpy(), all_ids
            )
            what = "tensor data" if measured else "recorded"
            if dangling.any():
                notes.append(
                    f"{int(dangling.sum())} {what} dependencies name node ids that are not in the trace and were ignored"
                )
            if (missing & ~dangling).any():
                notes.append(
                    f"{int((missing & ~dangling).sum())} {what} dependencies involve nodes outside the execution "
                    "graph (GPU annotation ranges, sync records or nodes without times) and were not used"
                )
        ok = ~missing & (dn != dp)
        if not measured:
            # nesting is the lane's business; an edge to an ancestor would close a cycle
            ok &= ppos[np.maximum(dn, 0)] != dp
        dn, dp = dn[ok], dp[ok]
        if measured:
            # on one thread, program order already says it (and equal times would close a loop
            # between a nested pair's points): only cross-thread data edges are kept
            same = lane[dn] == lane[dp]
            dn, dp = dn[~same], dp[~same]
            back = start[dn] < end[dp]
            if back.any():
                notes.append(
                    f"{int(back.sum())} data dependencies contradict the measured times (the consumer "
                    "started before its producer ended) and were not used"
                )
            dn, dp = dn[~back], dp[~back]
        if len(dn):
            add_edges(
                2 * dp + 1, 2 * dn, np.zeros(len(dn), np.int64), EK["data"], CAT["idle"], -1, -1, PRIO_CROSS
            )

    # the lane temporaries go first, then each list as soon as it is one array (peak memory)
    first_pts = chain[np.r_[True, chain_lane[1:] != chain_lane[:-1]]] if len(chain) else chain
    del a, b, ia, ib, lane_gpu, own, kind, lane_base, ecat, ewc, chain, chain_lane

    def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        out = np.concatenate(parts).astype(dtype, copy=False)
        parts.clear()
        return out

    src = joined(E_src, np.int32)  # point indexes (< 2**31): half the memory of int64
    dst = joined(E_dst, np.int32)
    base = joined(E_base, np.int64)
    wclass_a, kind_a, cat_a = joined(E_wc, np.int8), joined(E_kind, np.int8), joined(E_cat, np.int8)
    owner_a, prio_a = joined(E_own, np.int32), joined(E_prio, np.int8)
    g = PointGraph(
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
        rows=rows,
        ids=ids,
        rank=trace.meta.rank,
        notes=notes,
        measured=measured,
        lane=lane.astype(np.int32),  # kept with the graph: int32 (node counts < 2**31)
        pre=pre.astype(np.int32),
        last=last.astype(np.int32),
        launcher=launcher.astype(np.int32),
    )
    if sync_fix is not None:
        # a call that waited: its own time is what is left after the wait (the wait is the GPU's)
        srow, own_t = sync_fix
        span_e = (g.kind == EK["span"]) & np.isin(g.dst, 2 * srow + 1)
        pos_in = np.searchsorted(2 * srow + 1, g.dst[span_e])  # srow is sorted (flatnonzero)
        g.base[span_e] = np.minimum(g.base[span_e], own_t[pos_in])
    # the first point of every lane starts no earlier than it did (or at 0: recorded order)
    # a GPU stream's first op has its launch (or a wait) before it: it is held at its measured
    # time only when nothing comes before it (CPU threads start when they started; without
    # timestamps every lane starts at 0)
    if measured:
        kick = kick_edges(first_pts, ptime, gpu, lane, pid)
        if kick is not None:
            k_src, k_dst = kick
            append_edges(
                g, k_src, k_dst, ptime[k_dst] - ptime[k_src], EK["wake"], CAT["sync_wait"], PRIO_WAKE
            )
        has_in = np.zeros(2 * n, dtype=bool)
        has_in[g.dst] = True
        first_pts = first_pts[~has_in[first_pts]]
    g.root[first_pts] = ptime[first_pts] if measured else 0
    if measured and calibrated:
        calibrate(g)
    return g


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
