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

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from charllm_trace.analysis.classify import classify
from charllm_trace.graph.cuda_sync import cuda_sync_edges
from charllm_trace.model import Trace

# What-if classes of the scalable part of a lag (``--what-if NAME=FACTOR``).
WHATIF_CLASSES = ("gemm", "attention", "kernel", "comm", "memcpy", "launch", "cpu", "idle")
WC = {c: i for i, c in enumerate(WHATIF_CLASSES)}
#: aliases accepted by ``--what-if``: name -> classes it scales
WHATIF_ALIASES = {
    "gpu": ("gemm", "attention", "kernel"),
    "compute": ("gemm", "attention", "kernel"),
    "network": ("comm",),
    "cpu_all": ("cpu", "launch"),
}

# Edge kinds in the point graph (node-level kinds of model.EXEC_DEP_KINDS, plus a node's own span).
EDGE_KINDS = ("span", "thread_order", "nesting", "launch", "stream_order", "sync", "data", "collective", "wake")
EK = {k: i for i, k in enumerate(EDGE_KINDS)}

# What a path spends its time in (critical-path breakdown).
CATEGORIES = ("gpu_compute", "gpu_memory", "communication", "cpu_op", "launch", "sync_wait", "idle")
CAT = {c: i for i, c in enumerate(CATEGORIES)}

GEMM_RE = r"(?i)gemm|cutlass|cublas|xmma|matmul|^Cijk_|_tn_|_nt_|_nn_|_tt_|wgrad|dgrad|s884|s1688|h884|h1688"
ATTN_RE = r"(?i)flash|fmha|attention|attn|sdpa|softmax_warp"
SYNC_CALL_RE = (
    r"(?i)^(cuda|hip)(Stream|Device|Event|Ctx)Synchronize$|^(cuda|hip)(Stream|Event)Query$"
    r"|^(cuda|hip)Memcpy(2D|3D)?$|^(cuda|hip)MemcpyDtoH$|^(cuda|hip)MemcpyFromSymbol$"
)

# Lane edge priorities on equal bounds (critical-path ties): the lane wins over a cross edge.
PRIO_LANE, PRIO_CROSS = 2, 1
PRIO_WAKE = 3  # an inferred wake-up (see _wake_edges) binds before the lane on a tie

#: how far back a thread's first op looks for what started it (``_kick_edges``)
KICK_NS = 1_000_000
#: a gap on a CPU thread at least WAKE_GAP_NS long that ends within max(WAKE_NS, WAKE_FRAC x gap)
#: of an op ending on another thread of the same process is taken as a wait for that op
#: (``_wake_edges``)
WAKE_GAP_NS = 100_000
WAKE_NS = 50_000
WAKE_FRAC = 0.05


@dataclass
class PointGraph:
    """Points and edges of one rank (or a whole run once merged, see ``graph.run``)."""

    n_points: int
    time: np.ndarray  # measured (or, without timestamps, replayed) time of each point
    root: np.ndarray  # lower bound of each point's time (engine.NONE: none)
    src: np.ndarray  # int32 point indexes
    dst: np.ndarray
    base: np.ndarray  # scalable part of each edge's lag (ns)
    fixed: np.ndarray  # fixed part (ns), never scaled
    wclass: np.ndarray  # int8 what-if class of ``base`` (-1: none)
    kind: np.ndarray  # int8 EDGE_KINDS
    cat: np.ndarray  # int8 CATEGORIES of the edge's time
    owner: np.ndarray  # int32 node row (in ``rows``) the edge's time belongs to (-1: none)
    prio: np.ndarray  # int8
    # per node (rows of the active nodes, in trace.nodes order)
    rows: np.ndarray  # row position in trace.nodes of each active node
    ids: np.ndarray  # node id of each active node
    rank: int | None = None
    notes: list[str] = field(default_factory=list)
    measured: bool = True  # built from timestamps (else from recorded order)
    # per active node: its lane, its pre-order index in its lane's call tree and the index of the
    # last node of its subtree (descendants of i: same lane, pre in [pre[i], last[i]]), and the
    # active node that launched it (-1: none)
    lane: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pre: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    last: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    launcher: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def lags(self, factors: np.ndarray | None = None) -> np.ndarray:
        if factors is None:
            return self.base + self.fixed
        f = np.where(self.wclass >= 0, factors[np.maximum(self.wclass, 0)], 1.0)
        return np.rint(self.base * f).astype(np.int64) + self.fixed


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _pos_of(ids: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """Index in ``ids`` of each ref (-1: missing); refs may hold -1 for none."""
    if len(ids) == 0:
        return np.full(len(refs), -1, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    k = np.minimum(np.searchsorted(s, refs), len(s) - 1)
    return np.where((s[k] == refs) & (refs >= 0), order[k], -1)


def _dense(*keys: np.ndarray) -> np.ndarray:
    """Dense code of each row's key tuple: a 64-bit hash per row, one sort of the hashes, and a
    check that every row's keys equal its code's first row's (else an exact lexsort)."""
    if len(keys[0]) == 0:
        return np.zeros(0, dtype=np.int64)
    cols = [np.asarray(k, dtype=np.int64) for k in keys]
    h = pl.DataFrame({f"k{i}": c for i, c in enumerate(cols)}).hash_rows(seed=7).to_numpy()
    _, first, code = np.unique(h, return_index=True, return_inverse=True)
    code = code.reshape(-1).astype(np.int64)
    if all(np.array_equal(c[first][code], c) for c in cols):
        return code
    order = np.lexsort(tuple(reversed(cols)))  # pragma: no cover - a 64-bit hash collision
    stacked = np.stack([c[order] for c in cols], axis=1)
    new = np.r_[True, (stacked[1:] != stacked[:-1]).any(axis=1)]
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.cumsum(new) - 1
    return out


def _depth(ppos: np.ndarray) -> np.ndarray:
    """Number of ancestors of each row (list ranking by pointer jumping; cycles stop at 64 rounds)."""
    n = len(ppos)
    d = (ppos >= 0).astype(np.int64)
    jump = ppos.copy()
    for _ in range(64):
        valid = jump >= 0
        if not valid.any():
            break
        d[valid] += d[jump[valid]]
        nxt = np.full(n, -1, dtype=np.int64)
        nxt[valid] = jump[jump[valid]]
        jump = nxt
    return d


def _classes(nodes: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(what-if class, category of own time, is a runtime call, is a synchronising runtime call)
    per row of ``nodes`` (classified); name patterns are matched once per distinct name."""
    cls = nodes["cls"].to_numpy()
    kind = nodes["kind"].fill_null("other").to_numpy()
    names = nodes["name"].fill_null("")
    u = names.unique(maintain_order=True)
    codes = names.cast(pl.Enum(u)).to_physical().to_numpy()  # each distinct name matched once
    gemm = u.str.contains(GEMM_RE).to_numpy()[codes]
    attn = u.str.contains(ATTN_RE).to_numpy()[codes]
    sync_call = u.str.contains(SYNC_CALL_RE).to_numpy()[codes]
    del codes
    runtime = kind == "runtime"
    wc = np.full(len(cls), WC["cpu"], dtype=np.int8)
    cat = np.full(len(cls), CAT["cpu_op"], dtype=np.int8)
    gpu_compute = cls == "compute"
    wc[gpu_compute] = WC["kernel"]
    wc[gpu_compute & attn] = WC["attention"]
    wc[gpu_compute & gemm] = WC["gemm"]
    cat[gpu_compute] = CAT["gpu_compute"]
    mem = (cls == "memcpy") | (cls == "memset")
    wc[mem] = WC["memcpy"]
    cat[mem] = CAT["gpu_memory"]
    comm = (cls == "comm") | (cls == "cpu_comm")
    wc[comm] = WC["comm"]
    cat[comm] = CAT["communication"]
    wc[runtime] = WC["launch"]
    cat[runtime] = CAT["launch"]
    return wc, cat, runtime, sync_call & runtime


# ---------------------------------------------------------------------------
# the builder
# ---------------------------------------------------------------------------


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
    wc, cat, runtime, sync_call = (x[rows] for x in _classes(nodes))
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
    ppos = _pos_of(ids, parent_ids)
    ppos[gpu] = -1
    ppos[(ppos >= 0) & gpu[np.maximum(ppos, 0)]] = -1
    pid = col("pid", -1)
    tid = col("tid", -1)
    dev = col("device", -1).astype(np.int64)
    stream = col("stream", -1)
    # a GPU node without a stream (Chakra ETs) runs on a lane named by its tid
    g_lane_a = np.where(dev >= 0, dev, pid)
    g_lane_b = np.where(stream >= 0, stream, tid)
    lane = _dense(gpu.astype(np.int64), np.where(gpu, g_lane_a, pid), np.where(gpu, g_lane_b, tid))
    del tid, dev, stream, g_lane_a, g_lane_b  # (peak memory: node-sized temporaries go early)
    clipped = 0
    if measured:
        # the call tree on each thread from time nesting (the ``parent`` column may come from a host
        # execution trace whose parent runs on another thread): the Euler tour of a lane must be
        # time-ordered for its edges to be the measured gaps
        ppos = _time_parents(start, end, lane, gpu)
        depth = _depth(ppos)
        start, end, clipped = _make_monotone(start, end, ppos, depth, lane, ids)
        if clipped:
            notes.append(
                f"{clipped} ops overlap a neighbour or outlast their parent on their thread or stream; "
                "their end was cut for the graph (times that contradict nesting)"
            )
        depth = _depth(ppos)
        key = start
        del parent_ids
    else:
        # nesting only within a lane
        same_lane = np.where(ppos >= 0, lane[np.maximum(ppos, 0)] == lane, False)
        cross_parent = int(((ppos >= 0) & ~same_lane).sum())
        ppos[~same_lane] = -1
        if cross_parent:
            notes.append(f"{cross_parent} nodes whose parent runs on another thread were taken as top-level")
        depth = _depth(ppos)
        key = ids  # recorded order: Chakra and PyTorch number nodes in issue order
    selfdur = _self_durations(dur, ppos, gpu)

    # ---- lanes: Euler tour of each CPU call tree, kernels in order on each GPU stream ----
    order = np.lexsort((ids, depth, key, lane))  # pre-order within each lane
    pre = np.empty(n, dtype=np.int64)
    pre[order] = np.arange(n)
    del order, key
    last = _subtree_last(pre, ppos, depth)  # pre-order index of the last node of each subtree
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

    # ---- launch: runtime call start -> GPU op start ----
    corr = col("correlation", -1).astype(np.int64)
    rt_rows = np.flatnonzero(runtime & (corr > 0))
    gk = np.flatnonzero(gpu)
    launcher = np.full(n, -1, dtype=np.int64)
    if len(rt_rows) and len(gk):
        # first runtime call of each correlation id
        u, first = np.unique(corr[rt_rows], return_index=True)
        k = np.minimum(np.searchsorted(u, corr[gk]), len(u) - 1)
        hit = (u[k] == corr[gk]) & (corr[gk] > 0)
        launcher[gk[hit]] = rt_rows[first[k[hit]]]
    lid = col("launch_id", -1).astype(np.int64)
    lpos = _pos_of(ids, lid)
    miss = gpu & (launcher < 0) & (lpos >= 0)
    launcher[miss] = lpos[miss]
    launcher[(launcher >= 0) & gpu[np.maximum(launcher, 0)]] = -1
    gl = np.flatnonzero(gpu & (launcher >= 0))
    if len(gl):
        r = launcher[gl]
        if measured:
            delta = start[gl] - start[r]
            model = _launch_model(delta, start, end, gl, chain, chain_lane, gpu, n, end[r] - start[r])
        else:
            model = np.zeros(len(gl), dtype=np.int64)
        E_src.append(2 * r)
        E_dst.append(2 * gl)
        E_base.append(model)
        E_kind.append(np.full(len(gl), EK["launch"], np.int8))
        E_cat.append(np.full(len(gl), CAT["launch"], np.int8))
        E_wc.append(np.full(len(gl), WC["launch"], np.int8))
        E_own.append(r)
        E_prio.append(np.full(len(gl), PRIO_CROSS, np.int8))

    # ---- sync: GPU op end -> end of the CPU call that waited for it ----
    sync_fix: tuple[np.ndarray, np.ndarray] | None = None
    fix_rows: list[np.ndarray] = []
    fix_own: list[np.ndarray] = []
    exact_calls = np.zeros(0, dtype=np.int64)
    if measured and len(gk):
        # exact edges from the trace's cuda_sync records, where it has them
        cs = cuda_sync_edges(nodes)
        if cs.height:
            sp = _pos_of(ids, cs["src"].to_numpy().astype(np.int64))
            dp = _pos_of(ids, cs["dst"].to_numpy().astype(np.int64))
            ok = (sp >= 0) & (dp >= 0)
            sp, dp, to_end = sp[ok], dp[ok], cs["dst_end"].to_numpy()[ok]
            # stream wait event: recorded op end -> start of the op that waited (no lag of its own)
            gs, gd = sp[~to_end], dp[~to_end]
            if len(gs):
                E_src.append(2 * gs + 1)
                E_dst.append(2 * gd)
                E_base.append(np.zeros(len(gs), np.int64))
                E_kind.append(np.full(len(gs), EK["sync"], np.int8))
                E_cat.append(np.full(len(gs), CAT["sync_wait"], np.int8))
                E_wc.append(np.full(len(gs), -1, np.int8))
                E_own.append(np.full(len(gs), -1, np.int64))
                E_prio.append(np.full(len(gs), PRIO_CROSS, np.int8))
            # event / stream / context sync: waited op end -> end of the runtime call
            srow, grow = dp[to_end], sp[to_end]
            if len(srow):
                own_t = end[srow] - np.maximum(start[srow], end[grow])
                E_src.append(2 * grow + 1)
                E_dst.append(2 * srow + 1)
                E_base.append(own_t)
                E_kind.append(np.full(len(srow), EK["sync"], np.int8))
                E_cat.append(np.full(len(srow), CAT["sync_wait"], np.int8))
                E_wc.append(np.full(len(srow), -1, np.int8))
                E_own.append(srow)
                E_prio.append(np.full(len(srow), PRIO_CROSS, np.int8))
                fix_rows.append(srow)
                fix_own.append(own_t)
                exact_calls = np.unique(srow)
        # the heuristic for the other synchronising calls: the GPU op that ended last inside them
        sync_rows = np.flatnonzero(runtime & sync_call)
        sync_rows = sync_rows[~np.isin(sync_rows, exact_calls)]
        if len(sync_rows):
            g_order = gk[np.argsort(end[gk], kind="stable")]
            g_end = end[g_order]
            k = np.searchsorted(g_end, end[sync_rows], side="right") - 1
            ok = k >= 0
            k = np.maximum(k, 0)
            ok &= g_end[k] > start[sync_rows]
            srow, grow = sync_rows[ok], g_order[k[ok]]
            if len(srow):
                own_t = end[srow] - np.maximum(start[srow], end[grow])
                E_src.append(2 * grow + 1)
                E_dst.append(2 * srow + 1)
                E_base.append(own_t)
                E_kind.append(np.full(len(srow), EK["sync"], np.int8))
                E_cat.append(np.full(len(srow), CAT["sync_wait"], np.int8))
                E_wc.append(np.full(len(srow), -1, np.int8))
                E_own.append(srow)
                E_prio.append(np.full(len(srow), PRIO_CROSS, np.int8))
                fix_rows.append(srow)
                fix_own.append(own_t)
        if fix_rows:
            # one own time per call (a context sync waits for several ops: the least is left)
            rows_all, own_all = np.concatenate(fix_rows), np.concatenate(fix_own)
            u, inv = np.unique(rows_all, return_inverse=True)
            own_min = np.full(len(u), np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(own_min, inv, own_all)
            sync_fix = (u, own_min)

    # ---- wake-ups: a thread that resumes right after another thread's op ends waited for it ----
    if measured:
        wk = _wake_edges(a, b, ptime, gpu, lane, pid, kind, EK)
        if wk is not None:
            w_src, w_dst, w_lag, lane_edge, lane_base_new = wk
            E_base[0][lane_edge] = lane_base_new
            E_src.append(w_src)
            E_dst.append(w_dst)
            E_base.append(w_lag)
            E_kind.append(np.full(len(w_src), EK["wake"], np.int8))
            E_cat.append(np.full(len(w_src), CAT["sync_wait"], np.int8))
            E_wc.append(np.full(len(w_src), -1, np.int8))
            E_own.append(np.full(len(w_src), -1, np.int64))
            E_prio.append(np.full(len(w_src), PRIO_WAKE, np.int8))

    # ---- data: tensor producer end -> consumer start (host execution trace) ----
    dd = trace.deps
    extra_deps = dd.filter(pl.col("kind") == "data") if measured else dd
    if extra_deps.height:
        dn = _pos_of(ids, extra_deps["node"].to_numpy().astype(np.int64))
        dp = _pos_of(ids, extra_deps["dep"].to_numpy().astype(np.int64))
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
            E_src.append(2 * dp + 1)
            E_dst.append(2 * dn)
            E_base.append(np.zeros(len(dn), np.int64))
            E_kind.append(np.full(len(dn), EK["data"], np.int8))
            E_cat.append(np.full(len(dn), CAT["idle"], np.int8))
            E_wc.append(np.full(len(dn), -1, np.int8))
            E_own.append(np.full(len(dn), -1, np.int64))
            E_prio.append(np.full(len(dn), PRIO_CROSS, np.int8))

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
        kick = _kick_edges(first_pts, ptime, gpu, lane, pid)
        if kick is not None:
            k_src, k_dst = kick
            _append_edges(g, k_src, k_dst, ptime[k_dst] - ptime[k_src], EK["wake"], CAT["sync_wait"], PRIO_WAKE)
        has_in = np.zeros(2 * n, dtype=bool)
        has_in[g.dst] = True
        first_pts = first_pts[~has_in[first_pts]]
    g.root[first_pts] = ptime[first_pts] if measured else 0
    if measured and calibrated:
        calibrate(g)
    return g


def _time_parents(start: np.ndarray, end: np.ndarray, lane: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """Innermost enclosing op on the same CPU lane (-1: none); GPU ops have none."""
    from charllm_trace.converters.tree import prev_greater_equal

    n = len(start)
    ppos = np.full(n, -1, dtype=np.int64)
    cpu = np.flatnonzero(~gpu)
    if len(cpu) == 0:
        return ppos
    t0 = int(min(start[cpu].min(), end[cpu].min()))
    rel_e = end[cpu] - t0
    span = int(rel_e.max()) + 1
    order = np.lexsort((cpu, -rel_e, start[cpu], lane[cpu]))
    if float(lane.max() + 1) * span < 2**62:  # lanes apart: an earlier lane's key is always smaller
        p = prev_greater_equal(lane[cpu][order] * span + rel_e[order])
    else:  # pragma: no cover - a trace spanning centuries
        p = prev_greater_equal(rel_e[order])
    ok = p >= 0
    ok[ok] &= lane[cpu][order][p[ok]] == lane[cpu][order][ok]
    ppos[cpu[order[ok]]] = cpu[order[p[ok]]]
    return ppos


def _make_monotone(
    start: np.ndarray, end: np.ndarray, ppos: np.ndarray, depth: np.ndarray, lane: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Cut ends so that each lane's tour is time-ordered: an op ends no later than the next op
    after its subtree on its lane starts, and no later than its parent ends."""
    s, e = start, end.copy()
    n = len(s)
    cut = np.zeros(n, dtype=bool)
    order = np.lexsort((ids, depth, s, lane))
    pre = np.empty(n, dtype=np.int64)
    pre[order] = np.arange(n)
    last = _subtree_last(pre, ppos, depth)
    for _ in range(16):
        changed = False
        nxt = last + 1
        has = nxt < n
        cand = np.flatnonzero(has)
        j = order[nxt[cand]]
        same = lane[j] == lane[cand]
        cand, j = cand[same], j[same]
        over = e[cand] > s[j]
        if over.any():
            i = cand[over]
            e[i] = np.maximum(s[j[over]], s[i])
            cut[i] = True
            changed = True
        kid = np.flatnonzero(ppos >= 0)
        out = e[kid] > e[ppos[kid]]
        if out.any():
            i = kid[out]
            e[i] = np.maximum(e[ppos[i]], s[i])
            cut[i] = True
            changed = True
        if not changed:
            break
    return s, e, int(cut.sum())


def _subtree_last(pre: np.ndarray, ppos: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Pre-order index of the last node of each subtree (children before parents, by depth)."""
    last = pre.copy()
    if not (ppos >= 0).any():
        return last
    maxd = int(depth.max())
    by_depth = np.argsort(-depth, kind="stable")
    bounds = np.searchsorted(-depth[by_depth], np.arange(-maxd, 1))
    for di in range(len(bounds) - 1):
        sel = by_depth[bounds[di] : bounds[di + 1]]
        sel = sel[ppos[sel] >= 0]
        if len(sel):
            np.maximum.at(last, ppos[sel], last[sel])
    return last


def _self_durations(dur: np.ndarray, ppos: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    has = np.flatnonzero((ppos >= 0) & ~gpu)
    sums = np.bincount(ppos[has], weights=dur[has].astype(np.float64), minlength=len(dur)).astype(np.int64)
    return np.maximum(dur - sums, 0)


def _launch_model(
    delta: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    gl: np.ndarray,
    chain: np.ndarray,
    chain_lane: np.ndarray,
    gpu: np.ndarray,
    n: int,
    rt_dur: np.ndarray,
) -> np.ndarray:
    """Model lag of each launch edge: the measured launch-to-start delay where the GPU op
    waited for its launch (its stream was idle), at most the larger of the median of those
    delays and the launch call's own duration: how soon after its launch call the op could
    have started."""
    prev_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    on_gpu = gpu[chain // 2] & ((chain % 2) == 0)
    starts = chain[on_gpu] // 2  # GPU ops in lane order
    lanes = chain_lane[on_gpu]
    if len(starts) > 1:
        same = lanes[1:] == lanes[:-1]
        prev_end[starts[1:][same]] = end[starts[:-1][same]]
    idle_before = prev_end[gl] < start[gl]
    pos_delta = np.maximum(delta, 0)
    waited = pos_delta[idle_before]
    typical = int(np.median(waited)) if len(waited) else 0
    # an op that started later than its launch call plus the typical delay waited for something
    # else (an event on another stream, a peer): that part is left to calibration (a fixed wait)
    bound = np.maximum(typical, rt_dur)
    return np.minimum(pos_delta, bound).astype(np.int64)


def _wake_edges(a, b, ptime, gpu, lane, pid, kind, ek):
    """Inferred cross-thread waits: a gap (not an op's own span) of at least WAKE_GAP_NS on a CPU
    thread that ends at most max(WAKE_NS, WAKE_FRAC x gap) after an op on another thread of the
    same process ended
    (the latest such end) is taken as the thread waiting for that op (the main thread blocked in
    ``backward()`` while the autograd thread runs, a collective waiting on a gloo worker). Returns
    (src points, dst points, lags, lane edges whose lag becomes the time after the wake-up, those
    lags), or None."""
    ia, ib = a // 2, b // 2
    gap = ptime[b] - ptime[a]
    cand = np.flatnonzero(~gpu[ia] & (kind != ek["span"]) & (gap >= WAKE_GAP_NS))
    if len(cand) == 0:
        return None
    cpu_rows = np.flatnonzero(~gpu)
    ends = ptime[2 * cpu_rows + 1]
    key_pid = pid[cpu_rows]
    order = np.lexsort((ends, key_pid))
    e_sorted, p_sorted, r_sorted = ends[order], key_pid[order], cpu_rows[order]
    tb = ptime[b[cand]]
    ta = ptime[a[cand]]
    own_lane = lane[ib[cand]]
    own_pid = pid[ib[cand]]
    # position of the last end <= tb within the same pid: search on (pid, time) pairs
    pid_lo = np.searchsorted(p_sorted, own_pid, side="left")
    pid_hi = np.searchsorted(p_sorted, own_pid, side="right")
    k = np.empty(len(cand), dtype=np.int64)
    for pv in np.unique(own_pid):  # processes are few
        sel = own_pid == pv
        lo, hi = pid_lo[sel][0], pid_hi[sel][0]
        k[sel] = lo + np.searchsorted(e_sorted[lo:hi], tb[sel], side="right") - 1
    found = np.full(len(cand), -1, dtype=np.int64)
    for _ in range(4):  # step back over ends on the thread itself
        valid = (k >= pid_lo) & (found < 0)
        kk = np.maximum(k, 0)
        other = valid & (lane[r_sorted[kk]] != own_lane)
        found[other] = r_sorted[kk[other]]
        k = np.where(valid & ~other, k - 1, k)
    hit = found >= 0
    te = np.where(hit, ptime[2 * np.maximum(found, 0) + 1], 0)
    hit &= (te > ta) & (te < tb) & (tb - te <= np.maximum(WAKE_NS, (WAKE_FRAC * (tb - ta)).astype(np.int64)))
    if not hit.any():
        return None
    c = cand[hit]
    return (
        2 * found[hit] + 1,
        b[c],
        (tb - te)[hit],
        c,
        (tb - np.maximum(ta, te))[hit],
    )


def _kick_edges(first_pts, ptime, gpu, lane, pid):
    """A CPU thread's first op follows the latest point (an op's start or end) on another thread
    of the same process less than KICK_NS before it: the thread was started or handed work by
    what was running (the autograd thread by ``backward()``, a worker by an enqueue). Returns
    (src points, dst points) or None."""
    f = first_pts[~gpu[first_pts // 2] & (first_pts % 2 == 0)]
    cpu_rows = np.flatnonzero(~gpu)
    if len(f) == 0 or len(cpu_rows) < 2:
        return None
    pts = np.concatenate([2 * cpu_rows, 2 * cpu_rows + 1])
    order = np.lexsort((ptime[pts], pid[pts // 2]))
    pts = pts[order]
    t_s, p_s, l_s = ptime[pts], pid[pts // 2], lane[pts // 2]
    tf, pf, lf = ptime[f], pid[f // 2], lane[f // 2]
    found = np.full(len(f), -1, dtype=np.int64)
    for pv in np.unique(pf):  # processes are few
        sel = np.flatnonzero(pf == pv)
        lo, hi = np.searchsorted(p_s, pv, side="left"), np.searchsorted(p_s, pv, side="right")
        k = lo + np.searchsorted(t_s[lo:hi], tf[sel], side="right") - 1
        for _ in range(8):  # step back over the thread's own points (its first op and its children)
            valid = (k >= lo) & (found[sel] < 0)
            kk = np.maximum(k, lo)
            other = valid & (l_s[kk] != lf[sel])
            found[sel[other]] = pts[kk[other]]
            k = np.where(valid & ~other, k - 1, k)
    hit = found >= 0
    lag = tf - ptime[np.maximum(found, 0)]
    hit &= (lag > 0) & (lag <= KICK_NS)  # strictly earlier: an edge between equal times could close a loop
    if not hit.any():
        return None
    return found[hit], f[hit]


def _append_edges(g: PointGraph, src, dst, lag, kind: int, cat: int, prio: int) -> None:
    m = len(src)
    g.src = np.concatenate([g.src, src.astype(np.int32)])
    g.dst = np.concatenate([g.dst, dst.astype(np.int32)])
    g.base = np.concatenate([g.base, lag.astype(np.int64)])
    g.fixed = np.concatenate([g.fixed, np.zeros(m, np.int64)])
    g.wclass = np.concatenate([g.wclass, np.full(m, -1, np.int8)])
    g.kind = np.concatenate([g.kind, np.full(m, kind, np.int8)])
    g.cat = np.concatenate([g.cat, np.full(m, cat, np.int8)])
    g.owner = np.concatenate([g.owner, np.full(m, -1, np.int32)])
    g.prio = np.concatenate([g.prio, np.full(m, prio, np.int8)])


def calibrate(g: PointGraph) -> None:
    """Clip every lag to the measured gap and put each point's unexplained wait on its lane edge
    (fixed), so that the graph replays to the measured times (module docstring)."""
    t = g.time
    g.base = np.minimum(g.base, t[g.dst] - t[g.src])
    g.fixed = np.zeros(len(g.src), dtype=np.int64)
    cand = t[g.src] + g.base
    by_dst = np.argsort(g.dst, kind="stable")
    d_sorted = g.dst[by_dst]
    heads = np.flatnonzero(np.r_[True, d_sorted[1:] != d_sorted[:-1]]) if len(d_sorted) else d_sorted
    best = np.full(g.n_points, np.iinfo(np.int64).min, dtype=np.int64)
    if len(heads):
        best[d_sorted[heads]] = np.maximum.reduceat(cand[by_dst], heads)
    del heads
    best = np.maximum(best, g.root)
    need = np.flatnonzero((t > best) & (best > np.iinfo(np.int64).min))
    del best
    if len(need) == 0:
        return
    # carrier: the lane edge into the point if any, else the cross edge that came closest
    is_lane = np.isin(g.kind, [EK["span"], EK["thread_order"], EK["nesting"], EK["stream_order"]])
    # a sync or collective edge into the point (a wait the trace shows) carries it before the lane
    big = np.iinfo(np.int64).max
    waits = (g.kind == EK["sync"]) | (g.kind == EK["collective"]) | (g.kind == EK["wake"])
    score = np.where(waits, big, np.where(is_lane, big - 1, np.minimum(cand, big - 2)))
    del waits, is_lane, cand
    order = by_dst[np.lexsort((score[by_dst], d_sorted))]
    del score, by_dst, d_sorted
    last_of = np.searchsorted(g.dst[order], need, side="right") - 1
    ok = (last_of >= 0) & (g.dst[order][np.maximum(last_of, 0)] == need)
    e = order[last_of[ok]]
    g.fixed[e] += t[g.dst[e]] - (t[g.src[e]] + g.base[e])
    g.cat[e] = np.where(g.kind[e] == EK["stream_order"], CAT["sync_wait"], g.cat[e])
