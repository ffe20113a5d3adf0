"""Where each slice and launch arrow of the Perfetto export goes, so that Perfetto reads the file as
the trace is: slices that nest on every track, arrows bound to the call and the op they join.

**Nesting.** Perfetto's JSON importer keeps a stack of open slices per track; a complete event
that starts inside the innermost open slice and ends after it (a *partial overlap*) is dropped.
Real traces have them: the host ET's ``[pytorch|profiler|execution_trace|thread]`` container
nodes, whose spans are derived from their ops, straddle ops of other threads' roots; profilers
round times; a simulated timeline can overlap ops on one stream. The rule (:func:`nest_lanes`):
slices are taken in Perfetto's order (start, longest first, then file order); a slice that
partially overlaps the innermost slice open at its start moves, alone, to the next *overlap
lane* of its track (a track of its own beside the thread or stream, ``… (overlaps)``,
``… (overlaps 2)``, …), where the same rule applies again. Nothing is clipped: every slice keeps
its exact start and duration. A slice whose partner is itself moving stays where it is for that
round (its overlap may go away with the partner), so lanes stay few; rounds repeat until no
track has a partial overlap.

**Launch arrows** (:func:`launch_flows`). A flow event binds to the innermost slice on the stack
of its track *when Perfetto processes it*, and Perfetto does not close ended slices first; at
one timestamp it processes the complete events (longest first) before the flow events. So the
arrow of each GPU op (``kernel``, ``memcpy``, ``memset``; never a ``gpu_annotation`` range)
starts at the begin of the call that launched it, the first ``runtime`` call with the op's
``correlation`` (else the CPU op named by its ``launch_id``: ``core.classify.launch_calls``,
the launcher of the graph's ``launch`` edges, docs/model.md), and ends at the op's begin. The arrow is left out when it
cannot be drawn as the trace is: the op begins before its launch call (the two clocks disagree;
the arrow would run backwards), or another slice begins on the same track at the same time and
would be the innermost one there (a shorter one, or one written after it).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.core.classify import launch_calls
from charllm_trace.core.tree import prev_greater_equal

#: GPU node kinds a launch arrow may end on.
GPU_OP_KINDS = ("kernel", "memcpy", "memset")

#: Rounds of the lane assignment that hold back a slice whose partner is moving too; after them
#: every overlapping slice moves at once (a guard against pathological chains of overlaps).
_CAREFUL_ROUNDS = 256


def overlap_label(label: str, lane: int) -> str:
    """The name of overlap lane ``lane`` (>= 1) of the track named ``label``."""
    return f"{label} (overlaps)" if lane == 1 else f"{label} (overlaps {lane})"


def _conflicts(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Partial overlaps of one track's slices, given in Perfetto's order (start ascending, end
    descending, file order): (each slice that starts inside the innermost slice open at its start
    and ends after it, that innermost slice), positions in the arrays."""
    m = len(s)
    if m < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # p[j]: the nearest earlier slice ending no earlier (j's enclosing slice where they nest)
    p = prev_greater_equal(e)
    # c[i]: the nearest earlier slice still open at s[i] (ends after it); from i-1 up the p-chain:
    # the slices skipped between p[c] and c end before e[c] <= s[i], so they are closed too
    c = np.arange(-1, m - 1, dtype=np.int64)
    todo = np.flatnonzero(c >= 0)
    todo = todo[e[c[todo]] <= s[todo]]
    while len(todo):
        c[todo] = p[c[todo]]
        todo = todo[c[todo] >= 0]
        todo = todo[e[c[todo]] <= s[todo]]
    has = c >= 0
    bad = np.flatnonzero(has & (e[np.maximum(c, 0)] < e))
    return bad, c[bad]


def nest_lanes(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The overlap lane (0: the track itself) of each slice, so that slices nest on every
    (track, lane). The rows must be in file order, sorted by (start, duration descending), as
    they are written; ``track`` is a small non-negative integer per track."""
    n = len(start)
    lane = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lane
    rounds = 0
    while True:
        width = int(lane.max()) + 1
        order = np.argsort(track.astype(np.int64) * width + lane, kind="stable")  # keeps file order
        tk, ln = track[order], lane[order]
        bounds = np.flatnonzero(np.r_[True, (tk[1:] != tk[:-1]) | (ln[1:] != ln[:-1]), True])
        s, e = start[order], end[order]
        movers: list[np.ndarray] = []
        partners: list[np.ndarray] = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):  # one per track and lane: few
            i, q = _conflicts(s[a:b], e[a:b])
            if len(i):
                movers.append(order[a + i])
                partners.append(order[a + q])
        if not movers:
            return lane
        mv, pt = np.concatenate(movers), np.concatenate(partners)
        if rounds < _CAREFUL_ROUNDS:
            # hold back a slice whose partner moves away this round; the earliest overlap of a
            # track always moves (its partner has none before it), so every round makes progress
            mv = mv[~np.isin(pt, mv)]
        lane[mv] += 1
        rounds += 1


def last_at_start(track: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Whether each slice (rows in file order) is the last one of its track to begin at its start
    time: the innermost slice Perfetto finds there once it has read the complete events."""
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=bool)
    order = np.argsort(track, kind="stable")  # a track's slices stay in file order
    tk, st = track[order], start[order]
    last = np.empty(n, dtype=bool)
    last[order] = np.r_[(tk[1:] != tk[:-1]) | (st[1:] != st[:-1]), True]
    return last


def launch_flows(nodes: pl.DataFrame) -> tuple[pl.DataFrame, int, int]:
    """Launch arrows of one rank's slices, as they are written (file order).

    ``nodes`` needs columns id, kind, on_gpu, correlation, launch_id, start_ns, out_tid (the
    track written), ``_last`` (:func:`last_at_start`) and orig (position in the trace's node
    table). Returns (one row per arrow: s_ns, s_tid, f_ns, f_tid, in file order of the GPU ops;
    the number of arrows left out because the op begins before its launch call; the number left
    out because another slice begins with the call or the op on its track and would take it)."""
    nodes = nodes.select(
        "id", "kind", "on_gpu", "correlation", "launch_id", "start_ns", "out_tid", "_last", "orig"
    )
    n = nodes.height
    by_orig = np.argsort(nodes["orig"].to_numpy(), kind="stable")  # the trace's row order
    o = nodes[by_orig]
    kind = o["kind"].fill_null("")
    found = launch_calls(
        o["id"].fill_null(-1).to_numpy(),
        o["on_gpu"].fill_null(False).to_numpy(),
        (kind == "runtime").to_numpy(),
        o["correlation"].fill_null(-1).to_numpy(),
        o["launch_id"].fill_null(-1).to_numpy(),
    )
    launcher = np.full(n, -1, dtype=np.int64)  # file order: the launcher's file position
    launcher[by_orig] = np.where(found >= 0, by_orig[np.maximum(found, 0)], -1)
    kind_f = nodes["kind"].fill_null("")
    op = np.flatnonzero(
        nodes["on_gpu"].fill_null(False).to_numpy() & kind_f.is_in(GPU_OP_KINDS).to_numpy() & (launcher >= 0)
    )
    src = launcher[op]
    corr = nodes["correlation"].fill_null(-1).to_numpy()
    # arrows from a runtime call with the op's correlation first, then those from a launch_id
    by_corr = (kind_f.to_numpy()[src] == "runtime") & (corr[src] == corr[op]) & (corr[op] > 0)
    order = np.r_[np.flatnonzero(by_corr), np.flatnonzero(~by_corr)]
    op, src = op[order], src[order]
    start, tid, last = nodes["start_ns"].to_numpy(), nodes["out_tid"].to_numpy(), nodes["_last"].to_numpy()
    pairs = pl.DataFrame(
        {
            "s_ns": start[src],
            "s_tid": tid[src],
            "s_last": last[src],
            "f_ns": start[op],
            "f_tid": tid[op],
            "f_last": last[op],
        },
        schema={k: nodes.schema[c] for k, c in (("s_ns", "start_ns"), ("s_tid", "out_tid"), ("s_last", "_last"),
                                                 ("f_ns", "start_ns"), ("f_tid", "out_tid"), ("f_last", "_last"))},
    )  # fmt: skip
    backwards = pl.col("f_ns") < pl.col("s_ns")
    bound = pl.col("f_last") & pl.col("s_last")
    n_back, n_unbound = pairs.select(backwards.sum().alias("b"), (~backwards & ~bound).sum().alias("u")).row(
        0
    )
    keep = pairs.filter(~backwards & bound).select("s_ns", "s_tid", "f_ns", "f_tid")
    return keep, int(n_back), int(n_unbound)
