"""Critical paths through the execution graph (``charllm_trace.graph``).

The graph is re-timed (longest paths from each lane's first point; with measured,
calibrated lags this gives back the measured times). Each point remembers the edge that
fixed its time (its *binding* edge: on a tie, a lane edge wins over a cross edge). The
critical path ending at a point is the chain of binding edges walked back from it:

- per rank and step: the steps tile the rank's trace (``step_bounds``): from the next step's
  boundary (the start of its first GPU op; the last step: its last end) back to the step's
  own boundary (the first step: its ``ProfilerStep`` start);
- per rank for the whole trace, and for the job (the last point of the whole run, which
  may be on any rank).

Every edge's time on the path is put in one category (``CP_CATEGORIES``): a GPU op's own
span (``gpu_compute``, ``gpu_memory``, ``communication``), a CPU op's exclusive time
(``cpu_op``; ``launch`` for runtime calls such as ``cudaLaunchKernel``), time between
top-level ops on a CPU thread (``idle``), and waits: a GPU stream waiting for something
the trace does not show, a CPU call waiting for the GPU, a rank waiting for peers at a
collective (``sync_wait``). Launch latency (runtime call start -> kernel start) of a kernel
that found its stream idle counts as ``launch``; time a kernel waits in its stream's queue is
the earlier kernels' (``graph.inferred.launch_model``). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from charllm_trace.analysis.critical_batch import PathKeys, edge_keys, top_ops_all
from charllm_trace.analysis.results import (
    CP_CATEGORIES,
    CRITICAL_PATH_SCHEMA,
    CRITICAL_SEGMENT_SCHEMA,
    CriticalPathResult,
    frame,
)
from charllm_trace.core import dag as engine
from charllm_trace.core.model import Run
from charllm_trace.graph import points as P
from charllm_trace.graph.run import RunGraph, build_run_graph

assert P.CATEGORIES == CP_CATEGORIES  # one vocabulary

MIN = np.iinfo(np.int64).min
#: the first note of a critical path on a trace without timestamps
SIMULATED_CP = "SIMULATED: the trace has no timestamps; the path follows recorded durations"


def retime(rg: RunGraph, factors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(time, binding edge) of every point with lags scaled by ``factors`` (per what-if class)."""
    g = rg.g
    time, bind, done = engine.longest_path(g.n_points, g.src, g.dst, g.lags(factors), g.prio, g.root)
    if done < g.n_points:
        raise engine.cycle_error("execution graph", g.n_points - done)
    return time, bind


def windows(rg: RunGraph, run: Run, time: np.ndarray) -> list[tuple[int, int | None, int, int]]:
    """(rank, step, end point, start point) of each rank's steps and of its whole trace (step
    None), chosen on ``time`` (the measured times).

    The steps of a rank tile its trace (``step_bounds``): step k runs from its boundary point to
    the next step's, the first from its ``ProfilerStep#N`` start, the last to the last end among
    its ops (the annotation's subtree on its thread and the GPU ops they launched). The whole
    trace runs from the first step's start (or the first point) to the latest step end or GPU op
    end (a CPU thread that outlives the work, such as a profiler or event-polling thread, does
    not count), or to the last point when there are neither."""
    out: list[tuple[int, int | None, int, int]] = []
    for r in rg.ranks:
        part = rg.parts[r]
        off = rg.offsets[r]
        n = len(part.rows)
        if n == 0:
            continue
        t = time[off : off + 2 * n]
        tr = run.traces[r]
        steps = tr.steps() if part.measured else tr.steps().clear()
        rows = (
            [(r, s, off + e, off + a) for s, e, a in step_bounds(part, tr, steps, t)] if steps.height else []
        )
        act_gpu = tr.nodes["on_gpu"].fill_null(False).to_numpy()[part.rows]
        ends_pts = [2 * np.flatnonzero(act_gpu) + 1 + off] if act_gpu.any() else []
        ends_pts += [np.array([e for _, _, e, _ in rows], dtype=np.int64)] if rows else []
        cand = np.concatenate(ends_pts) if ends_pts else 2 * np.arange(n) + 1 + off
        sink = int(cand[np.argmax(time[cand])])
        if rows:
            w0 = min((w for _, _, _, w in rows), key=lambda p: time[p])
        else:
            w0 = off + int(np.argmin(t))
        if time[w0] > time[sink]:
            w0 = sink
        out.append((r, None, sink, int(w0)))
        out.extend(rows)
    return out


def step_bounds(part: P.PointGraph, tr, steps: pl.DataFrame, t: np.ndarray) -> list[tuple[int, int, int]]:
    """(step, end point, start point) of one rank's steps (points of ``part``; ``t``: their times).

    A step's *boundary* is the start of the first GPU op it launched (GPU time: the step's GPU
    work begins there, as in ``analysis.step_windows``), made non-decreasing over the steps; a
    step that launched none (a CPU trace) has its ``ProfilerStep#N`` start. Step k runs from its
    boundary to step k+1's; the first step from its ``ProfilerStep#N`` start, the last to the
    last end among its ops. So the windows do not overlap and add up to the whole trace (less
    the time after the last step's end), and a path through the boundaries is the sum of the
    steps' pieces."""
    ends = t[1::2]
    # the ProfilerStep#N annotations among the graph's nodes (found on the full name column: no
    # copy of the names)
    is_step = tr.nodes["name"].str.starts_with("ProfilerStep#").fill_null(False).to_numpy()[part.rows]
    step_nodes = np.flatnonzero(is_step)
    nums = (
        tr.nodes["name"]
        .gather(pl.Series(part.rows[step_nodes]))
        .str.extract(r"^ProfilerStep#(\d+)$", 1)
        .cast(pl.Int64)
        .to_list()
    )
    first_of: dict[int, int] = {}
    for i, num in zip(step_nodes.tolist(), nums, strict=True):
        if num is not None:
            first_of.setdefault(int(num), i)
    gpu = part.launcher >= 0
    pairs = [(int(s), first_of[int(s)]) for s in steps["step"].to_list() if int(s) in first_of]
    member = step_members(part, np.array([a for _, a in pairs], dtype=np.int64))
    m = len(pairs)
    ok = member >= 0
    last_end = np.full(m, MIN, dtype=np.int64)
    np.maximum.at(last_end, member[ok], ends[ok])
    g_ok = ok & gpu
    first_gpu = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_gpu, member[g_ok], t[0::2][g_ok])
    found: list[tuple[int, int, int, int]] = []  # (step, PS start point, boundary point, last end point)
    for j, (s, a) in enumerate(pairs):  # (steps are few)
        sel = np.flatnonzero(member == j)
        k = sel[np.argmax(ends[sel])]
        g = sel[gpu[sel] & (t[2 * sel] == first_gpu[j])]
        b = 2 * int(g[0]) if len(g) else 2 * a
        found.append((s, 2 * a, b, 2 * int(k) + 1))
    found.sort(key=lambda f: t[f[1]])
    for i in range(1, len(found)):  # boundaries non-decreasing
        if t[found[i][2]] < t[found[i - 1][2]]:
            found[i] = (found[i][0], found[i][1], found[i - 1][2], found[i][3])
    out = []
    for i, (s, ps, _, last) in enumerate(found):
        start = ps if i == 0 else found[i][2]
        end = found[i + 1][2] if i + 1 < len(found) else last
        if t[end] < t[start]:
            end = start
        out.append((s, end, start))
    return out


def step_members(part: P.PointGraph, anns: np.ndarray) -> np.ndarray:
    """For each active node, the index in ``anns`` (``ProfilerStep`` nodes) of the step it belongs
    to (-1: none): the annotation's subtree on its thread and the GPU ops those nodes launched. One
    pass over the nodes per thread that holds steps; steps nested in one another (never seen) fall
    back to one pass per step, a node going to the last that holds it."""
    n = len(part.lane)
    member = np.full(n, -1, dtype=np.int64)
    if len(anns) == 0:
        return member
    pre, last, lane = part.pre.astype(np.int64), part.last.astype(np.int64), part.lane
    for ln in np.unique(lane[anns]).tolist():
        js = np.flatnonzero(lane[anns] == ln)
        js = js[np.argsort(pre[anns[js]], kind="stable")]
        p0, p1 = pre[anns[js]], last[anns[js]]
        on = np.flatnonzero(lane == ln)
        if len(js) > 1 and (p0[1:] <= p1[:-1]).any():  # nested steps
            for j in js.tolist():
                a = anns[j]
                member[on[(pre[on] >= pre[a]) & (pre[on] <= last[a])]] = j
            continue
        k = np.searchsorted(p0, pre[on], side="right") - 1
        hit = (k >= 0) & (pre[on] <= p1[np.maximum(k, 0)])
        member[on[hit]] = js[k[hit]]
    la = part.launcher
    launched = (la >= 0) & (member[np.maximum(la, 0)] >= 0)
    member[launched] = member[la[launched]]
    return member


def critical_path(
    run: Run,
    *,
    graph: RunGraph | None = None,
    classified: dict[int, pl.DataFrame] | None = None,
    top: int = 10,
    factors: np.ndarray | None = None,
    segments: bool = True,
) -> CriticalPathResult:
    """Critical paths of every rank (per step and whole trace) and of the job. ``segments``: also
    the pieces of each whole-trace path, for timelines (one row per path edge: large on big
    traces, so ``analyze`` leaves them out)."""
    rg = graph or build_run_graph(run, classified)
    g = rg.g
    time, bind = retime(rg, factors)
    f = np.ones(len(P.WHATIF_CLASSES)) if factors is None else factors
    rows: list[dict] = []
    seg_frames: list[pl.DataFrame] = []
    # per rank: each active node's name as a code into that rank's distinct names (no strings per edge)
    vocab: dict[int, pl.Series] = {}
    code_of: dict[int, np.ndarray] = {}
    for r in rg.ranks:
        nm = run.traces[r].nodes["name"]
        u = nm.drop_nulls().unique(maintain_order=True)
        codes = nm.cast(pl.Enum(u)).to_physical().fill_null(len(u)).to_numpy()  # codes, no string copies
        vocab[r] = u.extend_constant("", 1)
        code_of[r] = codes[rg.parts[r].rows].astype(np.int64)
        del codes
    targets: list[tuple[str, int | None, int | None, int, int]] = [
        ("rank", r, s, sink, int(time[w0]))
        for r, s, sink, w0 in windows(rg, run, rg.g.time if rg.g.measured else time)
    ]
    whole = [(sink, w0) for scope, r, s, sink, w0 in targets if s is None]
    if len(whole) > 1:
        sink = max((w[0] for w in whole), key=lambda p: time[p])
        targets.append(("job", None, None, int(sink), min(w[1] for w in whole)))
    keys, lengths = PathKeys.empty(), []  # every path's edges: their top ops in one pass
    for i, (scope, r, s, sink, w0) in enumerate(targets):
        path = engine.walk_back(g.src, bind, time, sink, w0)
        edges = bind[path[:-1]] if len(path) > 1 else np.zeros(0, np.int64)
        pc = path_piece(g, time, path, edges, f, rg.point_rank[path], None, None)
        rows.append(path_row(scope, r, s, w0, int(time[sink]), [pc]))
        lengths.append((scope, r, s, int(time[sink] - time[path[-1]])))
        if len(edges) == 0:
            continue
        orank = rg.owner_rank[edges]
        keys.add(i, orank, *edge_keys(g, time, path, edges, orank, code_of))
        if segments and s is None:  # the timelines draw the whole-trace paths: their segments only
            seg_cat = np.where((g.fixed[edges] > 0) & (g.base[edges] <= 0), P.CAT["sync_wait"], g.cat[edges])
            seg_frames.append(_segments(scope, r, s, edges, path, time, seg_cat, g, rg, code_of, vocab))
    paths = frame(pl.DataFrame(rows) if rows else {}, CRITICAL_PATH_SCHEMA)
    seg = (
        frame(pl.concat(seg_frames), CRITICAL_SEGMENT_SCHEMA)
        if seg_frames
        else frame({}, CRITICAL_SEGMENT_SCHEMA)
    )
    top_ops = top_ops_all(keys, lengths, vocab, top)
    notes = list(rg.notes)
    if not g.measured:
        notes.insert(0, SIMULATED_CP)
    return CriticalPathResult(
        paths=paths, top_ops=top_ops, segments=seg, simulated=not g.measured, notes=notes
    )


def _names(orank: np.ndarray, own: np.ndarray, code_of, vocab) -> pl.Series:
    """Node names of path edges (null where the edge belongs to no node), gathered per rank."""
    out = pl.Series("name", [None] * len(own), dtype=pl.String)
    for rr in np.unique(orank).tolist():
        sel = np.flatnonzero((orank == rr) & (own >= 0))
        if len(sel) == 0 or rr not in vocab:
            continue
        out = out.scatter(sel, vocab[rr].gather(pl.Series(code_of[rr][own[sel]])))
    return out


@dataclass
class PathPiece:
    """Sums over part of a critical path (a run of its points; the pieces of one path share only
    their ends): what ``path_row`` and ``top_ops_of`` add up. The Dask engine walks a path one
    rank at a time (``engine/graph_step.py``): each rank sends its pieces."""

    cats: np.ndarray  # ns per CP_CATEGORIES
    wait: int  # positive fixed lags (unexplained waits) on the piece's edges
    n_segments: int
    n_edges: int
    ranks: set[int]  # ranks of its (real) points
    last_time: int  # time of its last point (the path's start, for the last piece)
    ops: pl.DataFrame | None  # (orank, code, cat, time_ns, count) of its edges that take time
    # (None where the caller sums the ops of many paths at once: critical_batch)


def path_piece(g, time, path, edges, f, path_ranks, orank, code_of) -> PathPiece:
    """The :class:`PathPiece` of points ``path`` (latest first; ``path_ranks``: their ranks, -1 for
    a virtual point) joined by ``edges`` (``orank``: the rank owning each edge; ``code_of``: rank ->
    each active node's name code; None: no ``ops``); ``f``: factors."""
    cats = np.zeros(len(CP_CATEGORIES), dtype=np.int64)
    wait = 0
    if len(edges):
        wc = g.wclass[edges]
        scaled = np.rint(g.base[edges] * np.where(wc >= 0, f[np.maximum(wc, 0)], 1.0)).astype(np.int64)
        fx = g.fixed[edges]
        # unexplained waits (positive fixed lags) are waiting; a negative fixed lag (a point
        # allowed before its source) stays with the edge's own category
        np.add.at(cats, g.cat[edges], scaled + np.minimum(fx, 0))
        wait = int(np.maximum(fx, 0).sum())
        cats[P.CAT["sync_wait"]] += wait
    ops = None if code_of is None else _piece_ops(g, time, path, edges, orank, code_of)
    return PathPiece(
        cats=cats,
        wait=wait,
        n_segments=int((time[path[:-1]] > time[path[1:]]).sum()) if len(edges) else 0,
        n_edges=len(edges),
        ranks={int(x) for x in np.unique(path_ranks) if x >= 0},
        last_time=int(time[path[-1]]),
        ops=ops,
    )


def _piece_ops(g, time, path, edges, orank, code_of) -> pl.DataFrame:
    code, seg_cat, seg_t = edge_keys(g, time, path, edges, orank, code_of)
    key = pl.DataFrame(
        {"orank": np.asarray(orank, np.int64), "code": code, "cat": seg_cat.astype(np.int64), "t": seg_t},
        schema={"orank": pl.Int64, "code": pl.Int64, "cat": pl.Int64, "t": pl.Int64},
    )
    return (
        key.filter(pl.col("t") > 0)  # pieces that take time (as the segments count them)
        .group_by("orank", "code", "cat")
        .agg(time_ns=pl.col("t").sum(), count=pl.len().cast(pl.Int64))
    )


def path_row(scope: str, r: int | None, s: int | None, w0: int, end: int, pieces: list[PathPiece]) -> dict:
    """One CRITICAL_PATH_SCHEMA row of the path made of ``pieces`` (latest first), ending at time
    ``end``, its window starting at ``w0``."""
    cats = np.sum([p.cats for p in pieces], axis=0)
    n_edges = sum(p.n_edges for p in pieces)
    row = {
        "scope": scope,
        "rank": r,
        "step": s,
        "start_ns": w0,
        "end_ns": end,
        "span_ns": end - w0,
        "length_ns": end - pieces[-1].last_time,
        "n_segments": sum(p.n_segments for p in pieces) if n_edges else 0,
        "ranks_on_path": ",".join(map(str, sorted(set().union(*(p.ranks for p in pieces))))),
    }
    row.update({f"{c}_ns": int(cats[i]) for i, c in enumerate(CP_CATEGORIES)})
    return row


def name_codes(ops: pl.DataFrame, vocab: dict[int, pl.Series], top: int | None = None) -> pl.DataFrame:
    """``ops`` (a path's (orank, code, cat) sums) ranked by time (the first ``4 x top`` only, when
    given), with each code's node name (null: the edge belongs to no node)."""
    agg = ops.sort(["time_ns", "orank", "code", "cat"], descending=[True, False, False, False])
    agg = agg.head(top * 4) if top is not None else agg
    return agg.with_columns(
        name=_names(
            agg["orank"].to_numpy(),
            agg["code"].to_numpy(),
            {k: np.arange(len(v)) for k, v in vocab.items()},
            vocab,
        )
    )


def top_ops_of(
    named: pl.DataFrame, scope: str, r: int | None, s: int | None, length: int, top: int
) -> pl.DataFrame:
    """The ``top`` (name, category) pairs by time on one path, from its (orank, code, cat, time_ns,
    count, name) sums: aggregated on integer keys, names resolved for the winners only."""
    agg = named.sort(["time_ns", "orank", "code", "cat"], descending=[True, False, False, False]).head(
        top * 4
    )
    out = (
        agg.with_columns(
            name=pl.col("name").fill_null("(wait / idle)"),
            category=pl.Series(
                np.asarray(CP_CATEGORIES, dtype=object)[agg["cat"].to_numpy()].tolist(), dtype=pl.String
            ),
        )
        .group_by("name", "category")
        .agg(pl.col("time_ns").sum(), pl.col("count").sum())
        .sort(["time_ns", "name", "category"], descending=[True, False, False])
        .head(top)
        .with_columns(
            scope=pl.lit(scope),
            rank=pl.lit(r, dtype=pl.Int64),
            step=pl.lit(s, dtype=pl.Int64),
            pct=(100.0 * pl.col("time_ns") / length) if length > 0 else pl.lit(None, dtype=pl.Float64),
        )
    )
    return out


def _segments(scope, r, s, edges, path, time, seg_cat, g, rg, code_of, vocab) -> pl.DataFrame:
    t_end = time[path[:-1]]
    t_start = time[path[1:]]
    own = g.owner[edges]
    orank = rg.owner_rank[edges]
    nid = np.full(len(edges), -1, dtype=np.int64)
    for rr in np.unique(orank).tolist():
        sel = np.flatnonzero((orank == rr) & (own >= 0))
        if len(sel) and rr in rg.parts:
            nid[sel] = rg.parts[rr].ids[own[sel]]
    n = len(edges)
    df = pl.DataFrame(
        {
            "scope": pl.Series([scope], dtype=pl.String).extend_constant(scope, n - 1),
            "rank": pl.Series([r], dtype=pl.Int64).extend_constant(r, n - 1),
            "step": pl.Series([s], dtype=pl.Int64).extend_constant(s, n - 1),
            "seg_rank": orank,
            "node_id": pl.Series(nid, dtype=pl.Int64).set(pl.Series(nid < 0), None),
            "name": _names(orank, own, code_of, vocab),
            "category": pl.Series(np.asarray(CP_CATEGORIES, dtype=object)[seg_cat].tolist(), dtype=pl.String),
            "start_ns": t_start,
            "end_ns": t_end,
        }
    )
    return df.filter(pl.col("end_ns") > pl.col("start_ns")).reverse()
