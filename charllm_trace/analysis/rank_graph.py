"""One rank's share of the run's execution graph (``graph/run.py``), for the Dask engine: built,
joined to its collectives and re-timed on the rank's worker; only small summaries leave it.

The run's graph is every rank's point graph joined at collective instances by a virtual point
*V* each (``graph.run``). A rank's share is its own graph plus a local copy of each of its
instances' V (edges start -> V and V -> end, as in the run's graph; V's time is the last
arrival, told by the driver). What crosses ranks is only what goes through the Vs:

- re-timing (``critical.retime``): the time of V_k is the latest of its participants' starts, and
  a rank's start of k is ``max(A[k], max_j D[j, k] + time(V_j))``: ``A`` its longest path from its
  own roots, ``D[j, k]`` its longest path from V_j (:func:`contract`, K + 1 longest-path passes for
  K instances). The driver solves the Vs on those (``graph_merge.solve_virtual``) and the rank
  re-times its graph with them (:func:`finish`): every point's time is the run graph's;
- binding edges: chosen among a point's in-edges by (bound, priority, edge index), never by the
  order points are visited (``core/_dag.c``), so the rank's graph binds its points as the run's
  does; a V binds to its latest participant (ties: the highest rank: the last edge);
- a critical path walked back through a V leaves the rank: the walk is done in pieces, one rank
  at a time (:func:`walk`, ``critical.path_piece``), the driver following it from rank to rank.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.analysis.critical import PathPiece, name_codes, path_piece, windows
from charllm_trace.analysis.virtual_pairs import kept_pairs
from charllm_trace.analysis.whatif import retimed_traces, step_spans, whatif_rank_rows
from charllm_trace.core import dag as engine
from charllm_trace.core.classify import classify
from charllm_trace.core.model import Run, Trace
from charllm_trace.graph import points as P
from charllm_trace.graph.run import RunGraph, break_cycles, collective_edges, cut_spans, instances

NONE = engine.NONE


@dataclass
class RankGraph:
    """A rank's share of the run's graph (stays on its worker)."""

    rank: int
    trace: Trace
    part: P.PointGraph  # the rank's point graph (rows, lanes: as built)
    inst: pl.DataFrame  # its collective instances (``graph.run.instances``)
    g: P.PointGraph | None = None  # joined: part's points, then one V per instance it takes part in
    vids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # run's V id of each local V
    li: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # its node of each local V
    sv: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # its edge start -> V of each
    dropped: int = 0  # dependencies on cycles, not used
    times: dict[str, np.ndarray] = field(default_factory=dict)
    binds: dict[str, np.ndarray] = field(default_factory=dict)
    code_of: np.ndarray | None = None
    vocab: pl.Series | None = None
    # what the Dask engine's rounds keep with it (``engine/graph_step.py``)
    join_notes: list[str] = field(default_factory=list)
    contracted: dict[str, tuple[np.ndarray, np.ndarray, int]] = field(default_factory=dict)
    summary: Any = None

    @property
    def n_real(self) -> int:
        return self.part.n_points

    def run_graph(self) -> RunGraph:
        """A one-rank :class:`RunGraph` over the joined graph (what ``windows`` and
        ``retimed_traces`` read: the rank's part at offset 0)."""
        assert self.g is not None
        n = self.g.n_points
        pr = np.r_[np.full(self.n_real, self.rank, np.int32), np.full(n - self.n_real, -1, np.int32)]
        return RunGraph(
            g=self.g,
            ranks=[self.rank],
            offsets={self.rank: 0},
            parts={self.rank: self.part},
            point_rank=pr,
            owner_rank=np.full(len(self.g.src), self.rank, np.int32),
        )


def rank_graph(rank: int, trace: Trace) -> RankGraph:
    """The rank's point graph (not calibrated) and its collective instances."""
    cn = classify(trace.nodes)
    part = P.build(trace, cn, calibrated=False)
    inst = instances(trace, cn, part)
    return RankGraph(rank=rank, trace=trace, part=part, inst=inst)


def join(rg: RankGraph, rows: pl.DataFrame) -> tuple[list[str], int]:
    """Join the rank's graph to its matched instances ``rows`` (``graph.run.match_instances``: this
    rank's rows, in their order), break its cycles and calibrate it, as ``build_run_graph`` does
    on the run's graph. Returns (the part's notes, dependencies dropped on cycles)."""
    p = rg.part
    n = p.n_points
    k = rows.height
    li = rows["_i"].to_numpy().astype(np.int64)
    tr = rows["_tr"].to_numpy().astype(np.int64)
    vt = rows["_vt"].to_numpy().astype(np.int64)
    if k:
        cut_spans(p, li, tr)
    ce = collective_edges(np.full(k, rg.rank, np.int64), li, n + np.arange(k, dtype=np.int64), tr, 2 * li)
    m = len(p.src) + 2 * k
    g = P.PointGraph(
        n_points=n + k,
        time=np.r_[p.time, vt].astype(np.int64),
        root=np.r_[p.root, vt].astype(np.int64),  # a V's own time: never calibrated (as in the run's)
        src=np.r_[p.src, ce["src"]].astype(np.int32),
        dst=np.r_[p.dst, ce["dst"]].astype(np.int32),
        base=np.r_[p.base, ce["base"]].astype(np.int64),
        fixed=np.zeros(m, np.int64),
        wclass=np.r_[p.wclass, ce["wclass"]].astype(np.int8),
        kind=np.r_[p.kind, np.full(2 * k, P.EK["collective"], np.int8)].astype(np.int8),
        cat=np.r_[p.cat, ce["cat"]].astype(np.int8),
        owner=np.r_[p.owner, ce["owner"]].astype(np.int32),
        prio=np.r_[p.prio, np.full(2 * k, P.PRIO_CROSS, np.int8)].astype(np.int8),
        rows=np.zeros(0, np.int64),
        ids=np.zeros(0, np.int64),
        rank=None,
        notes=[],
        measured=p.measured,
    )
    kept = break_cycles(g, [])
    if g.measured:
        P.calibrate(g)
    g.root[n:] = NONE  # V's bound comes from the run (``finish``)
    rg.g, rg.li, rg.vids, rg.dropped = g, li, rows["_v"].to_numpy().astype(np.int64), int((~kept).sum())
    e_sv = np.flatnonzero((g.kind == P.EK["collective"]) & (g.dst >= n))
    rg.sv = e_sv[np.argsort(g.dst[e_sv])]
    return list(p.notes), rg.dropped


def contract(rg: RankGraph, factors: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
    """(A, D, points not reached) of the rank's graph with lags scaled by ``factors``: ``A[k]`` the
    time of its start of instance k from its own roots alone; ``D`` rows (j, k, d): d the longest
    path from V_j to that start, for the pairs that no other of its Vs, V_i, explains (a pair
    whose longest path is D[j, i] + D[i, k] is implied by the two others: the run's V times are
    the same without it; in a chain of collectives this leaves about K pairs of the K(K-1)/2;
    found by ``virtual_pairs.kept_pairs``, K passes, not K^3 comparisons).
    Points not reached (more than 0: a cycle)."""
    g = rg.g
    assert g is not None
    n, k = rg.n_real, len(rg.vids)
    lag = g.lags(factors)
    t, _, done = engine.longest_path(g.n_points, g.src, g.dst, lag, g.prio, g.root)
    starts = 2 * rg.li
    a = t[starts].copy()
    rows = kept_pairs(g.n_points, g.src, g.dst, lag, g.prio, n, starts)
    if rows is None:  # lags too long to tag: every pair against every V (K^3)
        rows = reduce_pairs(longest_from_each(g, lag, n, k, starts))
    return a, rows, g.n_points - done


def longest_from_each(g: P.PointGraph, lag: np.ndarray, n: int, k: int, starts: np.ndarray) -> np.ndarray:
    """``D[j, k]``: the longest path from V_j (point ``n + j``) to each start (K passes)."""
    d = np.full((k, k), NONE, np.int64)
    for j in range(k):
        root = np.full(g.n_points, NONE, np.int64)
        root[n + j] = 0
        tj, _, _ = engine.longest_path(g.n_points, g.src, g.dst, lag, g.prio, root)
        d[j] = tj[starts]
    return d


def reduce_pairs(d: np.ndarray) -> np.ndarray:
    """(j, k, d) rows of the finite entries of ``d`` that no i explains: d[j, k] > d[j, i] + d[i, k]
    for every i (a path through V_i is a path of the rank's graph, so never longer)."""
    keep = d != NONE
    low = np.where(keep, d, -(1 << 60))  # no path: far below any sum of two paths
    for j in range(len(d)):
        keep[j] &= (low[j][:, None] + low).max(axis=0, initial=-(1 << 62)) != d[j]
    j, k = np.nonzero(keep)
    return np.stack([j, k, d[j, k]], axis=1).astype(np.int64)


def finish(rg: RankGraph, key: str, factors: np.ndarray | None, vtime: np.ndarray) -> None:
    """Re-time the rank's graph with its Vs at the run's times ``vtime`` (``key``: which re-timing)."""
    g = rg.g
    assert g is not None
    root = g.root.copy()
    root[rg.n_real :] = vtime
    t, bind, _ = engine.longest_path(g.n_points, g.src, g.dst, g.lags(factors), g.prio, root)
    bind[rg.n_real :] = -1  # a walk stops at a V: the driver says which rank it goes on in
    rg.times[key], rg.binds[key] = t, bind


def start_times(rg: RankGraph, key: str) -> np.ndarray:
    """The rank's start time of each of its instances (which participant a V binds to)."""
    return rg.times[key][2 * rg.li]


def targets(rg: RankGraph, key: str) -> list[tuple[int | None, int, int, int, int]]:
    """(step, end point, start point, its time, end's time) of the rank's critical-path windows
    (``critical.windows``), chosen on the measured times (or on re-timing ``key`` without them)."""
    g = rg.g
    assert g is not None
    t = rg.times[key]
    pick = g.time if g.measured else t
    run = Run(traces={rg.rank: rg.trace})
    return [(s, sink, w0, int(t[w0]), int(t[sink])) for _, s, sink, w0 in windows(rg.run_graph(), run, pick)]


def whatif_rows(rg: RankGraph) -> tuple[pl.DataFrame, tuple[int, int, int] | None]:
    """The rank's what-if rows (``whatif.whatif_rank_rows``) from re-timings ``base`` and ``new``,
    and its measured whole-trace window (end point, start time, end time) for the unexplained
    waits."""
    g = rg.g
    assert g is not None
    base_t, new_t = rg.times["base"], rg.times["new"]
    run = Run(traces={rg.rank: rg.trace})
    one = rg.run_graph()
    measured = retimed_traces(run, one, base_t)[rg.rank] if not g.measured else rg.trace
    predicted = retimed_traces(run, one, new_t)[rg.rank]
    m_all, p_all = windows(one, run, base_t), windows(one, run, new_t)
    m_win = next(((sink, w0) for _, s, sink, w0 in m_all if s is None), None)
    p_win = next(((sink, w0) for _, s, sink, w0 in p_all if s is None), None)
    spans = (step_spans(m_all, base_t).get(rg.rank, {}), step_spans(p_all, new_t).get(rg.rank, {}))
    m_whole = int(base_t[m_win[0]] - base_t[m_win[1]]) if m_win is not None else None
    p_whole = int(new_t[p_win[0]] - new_t[p_win[1]]) if p_win is not None else None
    rows = whatif_rank_rows(rg.rank, measured, predicted, m_whole, p_whole, spans)
    win = (m_win[0], int(base_t[m_win[1]]), int(base_t[m_win[0]])) if m_win is not None else None
    return rows, win


def _codes(rg: RankGraph) -> np.ndarray:
    if rg.code_of is None:  # each active node's name as a code (as critical_path numbers them)
        nm = rg.trace.nodes["name"]
        u = nm.drop_nulls().unique(maintain_order=True)
        codes = nm.cast(pl.Enum(u)).to_physical().fill_null(len(u)).to_numpy()
        rg.vocab = u.extend_constant("", 1)
        rg.code_of = codes[rg.part.rows].astype(np.int64)
    return rg.code_of


@dataclass
class Walked:
    """A piece of a critical path walked in one rank, and where the walk goes on."""

    piece: PathPiece
    names: pl.DataFrame  # the piece's ops (all, or the first 4 x top by time) with their names
    exit_v: int | None  # the run's V the walk reached (it goes on in that V's latest participant)
    truncated: bool = False  # ``names`` holds only the first 4 x top


def walk(rg: RankGraph, key: str, start: int | None, v: int | None, stop: int, top: int | None) -> Walked:
    """Walk back along re-timing ``key``'s binding edges from point ``start`` (or from the rank's
    copy of the run's V ``v``, through its own start) while times are >= ``stop``. The piece's
    ops: its first ``4 x top`` by time (all when ``top`` is None), named."""
    g = rg.g
    assert g is not None
    t, bind = rg.times[key], rg.binds[key]
    n = rg.n_real
    if v is not None:  # on a copy: the rank's own binding edges stay as they are
        k = int(np.flatnonzero(rg.vids == v)[0])
        start = n + k
        bind = bind.copy()
        bind[start] = rg.sv[k]
    path = engine.walk_back(g.src, bind, t, int(start), stop)
    edges = bind[path[:-1]] if len(path) > 1 else np.zeros(0, np.int64)
    code_of = _codes(rg)
    f = np.ones(len(P.WHATIF_CLASSES))
    orank = np.full(len(edges), rg.rank, np.int64)
    pc = path_piece(g, t, path, edges, f, np.where(path < n, rg.rank, -1), orank, {rg.rank: code_of})
    assert rg.vocab is not None
    names = name_codes(pc.ops, {rg.rank: rg.vocab}, top)
    truncated = names.height < pc.ops.height
    pc.ops = pc.ops.clear()  # sent once: named, in ``names``
    last = int(path[-1])
    exit_v = int(rg.vids[last - n]) if len(path) > 1 and last >= n else None
    return Walked(piece=pc, names=names, exit_v=exit_v, truncated=truncated)
