"""The cross-lane edges of one rank's point graph (:mod:`charllm_trace.graph.points`): ``launch``
(runtime call start -> GPU op start), ``sync`` (GPU op end -> end of the CPU call that waited for
it) and ``data`` (tensor producer end -> consumer start), gathered as blocks of arrays
(:class:`EdgeBlocks`) that ``points.build`` joins once.

Everything here is numpy over the active nodes' columns (:class:`PointRows`); no per-node loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from charllm_trace.core.classify import launch_calls
from charllm_trace.graph.classes import early_launch_notes
from charllm_trace.graph.inferred import launch_model
from charllm_trace.graph.lanes import pos_of
from charllm_trace.graph.pointgraph import CAT, EK, PRIO_CROSS, WC
from charllm_trace.graph.sync_waits import launched_before_edges, per_call_min, sync_kinds


@dataclass
class PointRows:
    """The active nodes of one rank as numpy columns, one entry per active row (``rows``: their
    positions in ``nodes``; ``sub``: whether some rows were left out)."""

    nodes: pl.DataFrame
    rows: np.ndarray
    sub: bool
    measured: bool
    ids: np.ndarray
    gpu: np.ndarray
    start: np.ndarray
    end: np.ndarray
    ppos: np.ndarray
    pid: np.ndarray
    lane: np.ndarray
    wc: np.ndarray
    cat: np.ndarray
    runtime: np.ndarray
    sync_call: np.ndarray

    @property
    def n(self) -> int:
        return len(self.rows)

    def col(self, name: str, fill: int | bool) -> np.ndarray:
        """One numeric column of the active rows."""
        return active_col(self.nodes, self.rows, self.sub, name, fill)


def active_col(nodes: pl.DataFrame, rows: np.ndarray, sub: bool, name: str, fill: int | bool) -> np.ndarray:
    """One numeric column of ``nodes`` at ``rows`` (all of it when ``sub`` is False)."""
    a = nodes[name].fill_null(fill).to_numpy()
    return a[rows] if sub else a


class EdgeBlocks:
    """The edges as blocks of arrays (one block per kind of edge), joined once."""

    def __init__(self) -> None:
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.base: list[np.ndarray] = []
        self.kind: list[np.ndarray] = []
        self.cat: list[np.ndarray] = []
        self.wc: list[np.ndarray] = []
        self.own: list[np.ndarray] = []
        self.prio: list[np.ndarray] = []

    def add_block(self, src, dst, base, kind, cat, wc, own, prio) -> None:
        """Append a block given as arrays, one entry per edge."""
        for parts, a in zip(
            (self.src, self.dst, self.base, self.kind, self.cat, self.wc, self.own, self.prio),
            (src, dst, base, kind, cat, wc, own, prio),
            strict=True,
        ):
            parts.append(a)

    def add(self, src, dst, base, kind: int, cat: int, wc: int, own, prio: int) -> None:
        """Append a block of cross edges (``own``: the owner row of each, or one for all)."""
        m = len(src)
        self.add_block(
            src,
            dst,
            base,
            np.full(m, kind, np.int8),
            np.full(m, cat, np.int8),
            np.full(m, wc, np.int8),
            own if isinstance(own, np.ndarray) else np.full(m, own, np.int64),
            np.full(m, prio, np.int8),
        )


def launch_edges(
    edges: EdgeBlocks,
    r: PointRows,
    cs: pl.DataFrame | None,
    chain: np.ndarray,
    chain_lane: np.ndarray,
    notes: list[str],
) -> tuple[np.ndarray, np.ndarray]:
    """Launch edges: runtime call start -> GPU op start. Returns each row's launching call (-1:
    none) and the GPU rows that have one."""
    launcher = launch_calls(r.ids, r.gpu, r.runtime, r.col("correlation", -1), r.col("launch_id", -1))
    gl = np.flatnonzero(r.gpu & (launcher >= 0))
    if len(gl):
        c = launcher[gl]
        model = _launch_lags(r, cs, chain, chain_lane, gl, c) if r.measured else np.zeros(len(gl), np.int64)
        edges.add(2 * c, 2 * gl, model, EK["launch"], CAT["launch"], WC["launch"], c, PRIO_CROSS)
    if r.measured and len(gl):  # contradicting edges: counted (calibrate keeps them as fixed lags)
        notes.extend(early_launch_notes(r.start[gl] - r.start[launcher[gl]]))
    return launcher, gl


def _launch_lags(
    r: PointRows,
    cs: pl.DataFrame | None,
    chain: np.ndarray,
    chain_lane: np.ndarray,
    gl: np.ndarray,
    c: np.ndarray,
) -> np.ndarray:
    start, end = r.start, r.end
    delta = start[gl] - start[c]
    waited = np.zeros(r.n, dtype=bool)  # GPU ops whose start waited for an event
    if cs is not None and cs.height:
        w_ids = cs.filter(~pl.col("dst_end"))["dst"].to_numpy().astype(np.int64)
        w_pos = pos_of(r.ids, w_ids)
        waited[w_pos[w_pos >= 0]] = True
    return launch_model(delta, start, end, gl, chain, chain_lane, r.gpu, r.n, end[c] - start[c], waited[gl])


class _SyncCalls:
    """The sync edges added so far and each waiting call's own time (for the fix in ``build``)."""

    def __init__(self, edges: EdgeBlocks, r: PointRows) -> None:
        self.edges, self.r = edges, r
        self.rows: list[np.ndarray] = []
        self.own: list[np.ndarray] = []

    def add(self, srow: np.ndarray, grow: np.ndarray) -> None:
        """Sync edges: the waited GPU op's end -> the end of the CPU call that waited for it (the
        call's own time: from the later of its start and the op's end, the least over the ops one
        call waits for, so only the op that ended last binds it; kept for the fix)."""
        start, end = self.r.start, self.r.end
        own_t = per_call_min(srow, end[srow] - np.maximum(start[srow], end[grow]))
        self.edges.add(2 * grow + 1, 2 * srow + 1, own_t, EK["sync"], CAT["sync_wait"], -1, srow, PRIO_CROSS)
        self.rows.append(srow)
        self.own.append(own_t)

    def fix(self) -> tuple[np.ndarray, np.ndarray] | None:
        """One own time per call (a context sync waits for several ops: the least is left)."""
        if not self.rows:
            return None
        rows_all, own_all = np.concatenate(self.rows), np.concatenate(self.own)
        u, inv = np.unique(rows_all, return_inverse=True)
        own_min = np.full(len(u), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(own_min, inv, own_all)
        return u, own_min


def sync_edges(
    edges: EdgeBlocks, r: PointRows, cs: pl.DataFrame, gk: np.ndarray, gl: np.ndarray, launcher: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Sync edges of a measured rank with GPU ops: exact ones from the trace's cuda_sync records
    (``cs``), the launched-before rule for device and stream synchronizes, and the GPU op that
    ended last inside every other synchronising call. Returns the waiting calls and their own
    time (None: no sync edge)."""
    calls = _SyncCalls(edges, r)
    exact_calls = _recorded_syncs(edges, r, cs, calls)
    # the heuristic for the other synchronising calls: the GPU op that ended last inside them
    sync_rows = np.flatnonzero(r.runtime & r.sync_call)
    sync_rows = sync_rows[~np.isin(sync_rows, exact_calls)]
    # device and stream synchronizes: the ops launched before them (sync_waits), not timing
    is_dev, is_str = sync_kinds(r.nodes["name"].gather(r.rows[sync_rows] if r.sub else sync_rows))
    by_order = is_dev | is_str
    srow, grow = launched_before_edges(
        sync_rows[by_order], is_dev[by_order], r.start, r.end, r.lane, gl, launcher
    )
    if len(srow):
        calls.add(srow, grow)
        sync_rows = sync_rows[~np.isin(sync_rows, srow)]
    if len(sync_rows):
        srow, grow = _last_ended_inside(r, gk, sync_rows)
        if len(srow):
            calls.add(srow, grow)
    return calls.fix()


def _recorded_syncs(edges: EdgeBlocks, r: PointRows, cs: pl.DataFrame, calls: _SyncCalls) -> np.ndarray:
    """Exact edges from the trace's cuda_sync records, where it has them; returns the calls
    they bind."""
    if not cs.height:
        return np.zeros(0, dtype=np.int64)
    sp = pos_of(r.ids, cs["src"].to_numpy().astype(np.int64))
    dp = pos_of(r.ids, cs["dst"].to_numpy().astype(np.int64))
    ok = (sp >= 0) & (dp >= 0)
    sp, dp, to_end = sp[ok], dp[ok], cs["dst_end"].to_numpy()[ok]
    # stream wait event: recorded op end -> start of the op that waited (no lag of its own)
    gs, gd = sp[~to_end], dp[~to_end]
    if len(gs):
        edges.add(
            2 * gs + 1, 2 * gd, np.zeros(len(gs), np.int64), EK["sync"], CAT["sync_wait"], -1, -1, PRIO_CROSS
        )
    # event / stream / context sync: waited op end -> end of the runtime call
    srow, grow = dp[to_end], sp[to_end]
    if not len(srow):
        return np.zeros(0, dtype=np.int64)
    calls.add(srow, grow)
    return np.unique(srow)


def _last_ended_inside(r: PointRows, gk: np.ndarray, sync_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each synchronising call, the GPU op that ended last before the call ended, if it
    ended after the call started."""
    g_order = gk[np.argsort(r.end[gk], kind="stable")]
    g_end = r.end[g_order]
    k = np.searchsorted(g_end, r.end[sync_rows], side="right") - 1
    ok = k >= 0
    k = np.maximum(k, 0)
    ok &= g_end[k] > r.start[sync_rows]
    return sync_rows[ok], g_order[k[ok]]


def data_edges(edges: EdgeBlocks, r: PointRows, deps: pl.DataFrame, notes: list[str]) -> None:
    """Data edges: tensor producer end -> consumer start (host execution trace); without times,
    every recorded dependency."""
    extra_deps = deps.filter(pl.col("kind") == "data") if r.measured else deps
    if not extra_deps.height:
        return
    dn = pos_of(r.ids, extra_deps["node"].to_numpy().astype(np.int64))
    dp = pos_of(r.ids, extra_deps["dep"].to_numpy().astype(np.int64))
    missing = (dn < 0) | (dp < 0)
    if missing.any():
        _note_unused_deps(r, extra_deps, missing, notes)
    ok = ~missing & (dn != dp)
    if not r.measured:
        # nesting is the lane's business; an edge to an ancestor would close a cycle
        ok &= r.ppos[np.maximum(dn, 0)] != dp
    dn, dp = dn[ok], dp[ok]
    if r.measured:
        dn, dp = _cross_thread_forward(r, dn, dp, notes)
    if len(dn):
        edges.add(
            2 * dp + 1, 2 * dn, np.zeros(len(dn), np.int64), EK["data"], CAT["idle"], -1, -1, PRIO_CROSS
        )


def _note_unused_deps(r: PointRows, deps: pl.DataFrame, missing: np.ndarray, notes: list[str]) -> None:
    all_ids = r.nodes["id"].to_numpy()
    dangling = ~np.isin(deps["node"].to_numpy(), all_ids) | ~np.isin(deps["dep"].to_numpy(), all_ids)
    what = "tensor data" if r.measured else "recorded"
    if dangling.any():
        notes.append(
            f"{int(dangling.sum())} {what} dependencies name node ids that are not in the trace and were ignored"
        )
    if (missing & ~dangling).any():
        notes.append(
            f"{int((missing & ~dangling).sum())} {what} dependencies involve nodes outside the execution "
            "graph (GPU annotation ranges, sync records or nodes without times) and were not used"
        )


def _cross_thread_forward(
    r: PointRows, dn: np.ndarray, dp: np.ndarray, notes: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """On one thread, program order already says it (and equal times would close a loop between
    a nested pair's points): only cross-thread data edges are kept, and only those the measured
    times allow."""
    same = r.lane[dn] == r.lane[dp]
    dn, dp = dn[~same], dp[~same]
    back = r.start[dn] < r.end[dp]
    if back.any():
        notes.append(
            f"{int(back.sum())} data dependencies contradict the measured times (the consumer "
            "started before its producer ended) and were not used"
        )
    return dn[~back], dp[~back]
