"""Edges the trace does not record, inferred from its times: launch latencies, cross-thread
wake-ups and thread starts (``model.EXEC_DEP_KINDS``: ``launch``, ``wake``)."""

from __future__ import annotations

import numpy as np

from charllm_trace.graph.pointgraph import KICK_NS, WAKE_FRAC, WAKE_GAP_NS, WAKE_NS


def launch_model(
    delta: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    gl: np.ndarray,
    chain: np.ndarray,
    chain_lane: np.ndarray,
    gpu: np.ndarray,
    n: int,
    rt_dur: np.ndarray,
    waited: np.ndarray | None = None,
) -> np.ndarray:
    """Model lag of each launch edge (runtime call start -> GPU op start): how soon after its
    launch call the op could have started.

    An op *found its stream idle* when the previous op on its stream had ended by the time its
    launch call began; the launch-to-start delays of those ops (less those whose start waited
    for an event, ``waited``) are the measured launch latency.
    An op's lag is its own delay, at most the median latency (for an op that found its stream
    idle: at most the larger of that and its call's own duration). An op queued behind others (its stream busy when it was launched) thus gets the
    typical latency, not its delay: the time it waited in the queue is explained by its stream
    edge (the earlier ops' GPU time) and never booked as launch. Kernels of a graph launch share
    the launch's correlation: the first finds its stream idle, the others queue behind it."""
    prev_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    on_gpu = gpu[chain // 2] & ((chain % 2) == 0)
    starts = chain[on_gpu] // 2  # GPU ops in lane order
    lanes = chain_lane[on_gpu]
    if len(starts) > 1:
        same = lanes[1:] == lanes[:-1]
        prev_end[starts[1:][same]] = end[starts[:-1][same]]
    idle_before = prev_end[gl] <= start[gl] - delta  # drained before the launch call began
    pos_delta = np.maximum(delta, 0)
    # the latency sample: ops that found their stream idle and waited for no event (``waited``:
    # per launch edge, its op's start waited for a recorded event); a measured value (no mean)
    sample = idle_before if waited is None else idle_before & ~waited
    lat = pos_delta[sample]
    typical = int(np.percentile(lat, 50, method="lower")) if len(lat) else 0
    # an op that started later than its launch call plus the typical delay waited for something
    # else (an event on another stream, a peer): that part is left to calibration (a fixed wait)
    # a long launch call (a graph launch, a call blocked on a full queue) may hold back the op it
    # launches onto an idle stream; a queued op is held back by its stream, not by its call
    bound = np.where(idle_before, np.maximum(typical, rt_dur), typical)
    return np.minimum(pos_delta, bound).astype(np.int64)


def wake_edges(a, b, ptime, gpu, lane, pid, kind, ek):
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


def kick_edges(first_pts, ptime, gpu, lane, pid):
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
