"""The critical path and what-if with ``--scheduler``: each rank's share of the execution graph
is built and re-timed on its worker (``analysis/rank_graph.py``); the driver only matches the
collective instances, solves the virtual points' times and follows critical paths from rank to
rank (``analysis/graph_merge.py``). What travels per rank (docs/scale.md): its collective
instances (5 numbers each), per re-timing its A (K integers for K instances) and the (V_j, V_k)
pairs of D no other virtual point explains (3 integers each: about K for chained collectives),
its start times, windows and what-if rows, and the pieces of the paths walked in it (category
sums and the first 40 (name, category) sums of its ops on the path). Never a node table nor a
graph.

Rounds: build (instances back), join and contract (A, D back), finish (windows, what-if rows,
start times back), then one round per rank a critical path crosses."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.analysis import graph_merge as gm
from charllm_trace.analysis import rank_graph as rgm
from charllm_trace.analysis.results import AnalyzeOptions, CriticalPathResult, WhatIfResult
from charllm_trace.analysis.whatif import factor_array
from charllm_trace.analysis.whatif_keys import per_edge_keys
from charllm_trace.core.dag import cycle_error
from charllm_trace.core.errors import UsageError
from charllm_trace.engine import graph_fold as gf
from charllm_trace.engine.shelf import Ref, Shelf
from charllm_trace.engine.spill import read_bytes, write_bytes
from charllm_trace.graph.run import match_instances

#: top ops kept per path (``critical.critical_path``'s default)
TOP = 10
#: critical paths turned into their result rows at a time (:func:`_critical`)
PATH_CHUNK = 64


def build_task(loaded: Any) -> rgm.RankGraph:
    return rgm.rank_graph(loaded.rank, loaded.trace)


def instances_task(rg: rgm.RankGraph) -> tuple[int, bool, pl.DataFrame]:
    return rg.rank, rg.part.measured, rg.inst


def join_task(rg: rgm.RankGraph, rows: pl.DataFrame, sets: dict[str, np.ndarray | None]) -> rgm.RankGraph:
    notes, dropped = rgm.join(rg, rows)
    rg.contracted = {k: rgm.contract(rg, f) for k, f in sets.items()}
    rg.join_notes = notes
    return rg


def contracted_task(
    rg: rgm.RankGraph,
) -> tuple[list[str], int, np.ndarray, dict[str, tuple[np.ndarray, np.ndarray, int]]]:
    return rg.join_notes, rg.dropped, rg.vids, rg.contracted


def finish_task(
    rg: rgm.RankGraph, vtimes: dict[str, np.ndarray], sets: dict[str, np.ndarray | None], what_if: bool
) -> rgm.RankGraph:
    for k, f in sets.items():
        rgm.finish(rg, k, f, vtimes[k])
    rg.summary = (
        rgm.start_times(rg, "base"),
        rgm.targets(rg, "base"),
        rgm.whatif_rows(rg) if what_if else None,
    )
    return rg


def summary_task(rg: rgm.RankGraph) -> Any:
    return rg.summary


def walk_task(
    rg: rgm.RankGraph, reqs: list[tuple[int, int, int | None, int | None, int, bool]]
) -> list[tuple[int, int, rgm.Walked]]:
    """(path, piece number, piece) of each (path, piece number, start point or V, stop time, all
    ops?) walked in this rank."""
    return [
        (i, j, _packed(rgm.walk(rg, "base", start, v, stop, None if full else TOP)))
        for i, j, start, v, stop, full in reqs
    ]


def _packed(w: rgm.Walked) -> rgm.Walked:
    """``w`` with its op names (a frame of up to 4 x TOP rows) pickled: the driver keeps every
    path's names until the walk ends (on disk, :class:`_Names`), and :func:`_critical` unpickles
    them a chunk of paths at a time."""
    return dataclasses.replace(w, names=pickle.dumps(w.names, protocol=pickle.HIGHEST_PROTOCOL))


class _Held:
    """The ranks' graphs as futures on their workers (``build_task`` of each rank read and kept):
    each round maps a task over the graphs, its results gathered by a second one."""

    def __init__(self, eng: Any, handles: list[Any]) -> None:
        self.eng = eng
        self.rgs = eng.map(build_task, handles)
        self.held = [self.rgs]

    def instances(self, each: Any) -> list[Any]:
        return self.eng.gather_batches(self.eng.map(instances_task, self.rgs), each=each)

    def step(self, task: Any, extract: Any, *more: Sequence[Any], each: Any, **kw: Any) -> list[Any]:
        """``task`` (which changes a rank's graph) on every graph, then ``extract`` of each
        (gathered a batch at a time, each batch given to ``each``)."""
        nxt = self.eng.map(task, self.rgs, *more, **kw)
        out = self.eng.gather_batches(self.eng.map(extract, nxt), each=each)
        self.rgs = nxt
        self.held.append(nxt)
        return out

    def walk(self, idx: list[int], reqs: list[Any], each: Any) -> None:
        self.eng.gather_batches(self.eng.map(walk_task, [self.rgs[i] for i in idx], reqs), each=each)

    def close(self) -> None:
        for h in self.held:
            self.eng.release(h)


class _Stored:
    """The ranks' graphs as files (``store_graph``: each rank's analysis task built its graph and
    wrote it where the rank rows go, ``engine/spill.py``): each round's task reads a rank's graph,
    works on it, writes it back when it changed it and returns its small result, so a worker
    holds the graphs of the ranks in flight, not of all its ranks."""

    def __init__(self, eng: Any, files: list[str]) -> None:
        self.eng = eng
        self.files = files

    def instances(self, each: Any) -> list[Any]:
        return self.eng.map_gather(stored_task, self.files, step="instances", each=each)

    def step(self, task: Any, extract: Any, *more: Sequence[Any], each: Any, **kw: Any) -> list[Any]:
        name = {join_task: "join", finish_task: "finish"}[task]
        return self.eng.map_gather(stored_task, self.files, *more, step=name, each=each, **kw)

    def walk(self, idx: list[int], reqs: list[Any], each: Any) -> None:
        self.eng.map_gather(stored_task, [self.files[i] for i in idx], reqs, step="walk", each=each)

    def close(self) -> None:
        pass


def stored_task(path: str, *args: Any, step: str, **kw: Any) -> Any:
    """One round's work on the rank graph stored at ``path`` (:class:`_Stored`)."""
    rg = load_graph(path)
    if step == "instances":
        return instances_task(rg)
    if step == "walk":
        return walk_task(rg, *args)
    if step == "join":
        rg = join_task(rg, *args, **kw)
        store_graph(rg, path)
        return contracted_task(rg)
    rg = finish_task(rg, *args, **kw)
    store_graph(rg, path)
    return summary_task(rg)


def graph_file(where: str, rank: int) -> str:
    """Where a rank's graph is stored under the spill location ``where``."""
    return f"{where.rstrip('/')}/graph/rank-{rank}.pickle"


def store_graph(rg: rgm.RankGraph, path: str) -> None:
    write_bytes(path, pickle.dumps(rg, protocol=pickle.HIGHEST_PROTOCOL))


def load_graph(path: str) -> rgm.RankGraph:
    return pickle.loads(read_bytes(path))


def graph_step(
    eng: Any,
    handles: list[Any],
    ranks: list[int],
    options: AnalyzeOptions,
    skipped: dict[str, str],
    no_ts: list[int],
    stored: list[str] | None = None,
) -> tuple[CriticalPathResult | None, WhatIfResult | None]:
    """``analysis.api._graph_analyses`` of the ranks read on the workers (``handles``, in rank
    order), or of their graphs stored in the files ``stored`` (in rank order: :class:`_Stored`)."""
    if gm.skip_untimed(options, skipped, no_ts):
        return None, None
    sets: dict[str, np.ndarray | None] = {"base": None}
    if options.what_if:
        per_edge = per_edge_keys(options.what_if)
        if per_edge:
            raise UsageError(
                f"--what-if: {per_edge[0]} needs the whole run's collectives and operators: "
                "run it without --scheduler"
            )
        sets["new"] = factor_array(dict(options.what_if))
    graphs = _Stored(eng, stored) if stored is not None else _Held(eng, handles)
    try:
        return _rounds(graphs, ranks, options, skipped, sets)
    finally:
        graphs.close()


def _rounds(graphs, ranks, options, skipped, sets):
    """The rounds, each gathered a batch at a time and folded (``engine/graph_fold.py``)."""
    got = gf.Instances()
    graphs.instances(got)
    measured = got.measured
    inst, match_notes = match_instances(got.frames) if measured and len(ranks) > 1 else match_instances([])
    del got
    n_v = int(inst["_v"].max()) + 1 if inst.height else 0
    con = gf.Contracted(ranks, list(sets))
    graphs.step(join_task, contracted_task, gf.RowsByRank(inst, ranks), each=con, sets=sets)
    del inst
    notes = gm.graph_notes(con.notes, match_notes, con.dropped, measured)
    vtimes: dict[str, np.ndarray] = {}
    for k in sets:
        vt, v_left = gm.solve_virtual(n_v, [con.share(k)])
        if con.left[k] or v_left:
            gm.skip_cycles(options, skipped, cycle_error("execution graph", con.left[k] + v_left).problem)
            return None, None
        vtimes[k] = vt
    per_rank = gf.VTimesByRank(vtimes, con)
    del con
    summaries = gf.Summaries(ranks)
    graphs.step(finish_task, summary_task, per_rank, each=summaries, sets=sets, what_if=bool(options.what_if))
    who = gm.bind_virtual(n_v, summaries.binds(per_rank))
    del per_rank
    cp_paths, starts = _paths(summaries, options)
    waits: list[gm.Path] = []
    if options.what_if:
        for (r, _), s2 in zip(summaries.targets, summaries.whatif, strict=True):
            if s2[1] is not None:
                sink, w0_t, sink_t = s2[1]
                p = gm.Path("rank", r, None, w0_t, sink_t)
                waits.append(p)
                starts.append((p, r, sink))
    with _Names() as names:  # the walk's op names wait on this process's disk, not in its memory
        _walk(graphs, {r: i for i, r in enumerate(ranks)}, starts, who, names)
        cp = _critical(cp_paths, notes, measured, names) if options.critical_path else None
    wi = None
    if options.what_if:
        wi = gm.whatif_from([s2[0] for s2 in summaries.whatif], waits, dict(options.what_if), notes, measured)
    return gm.keep_steps(options, cp, wi)


class _Names:
    """The walked pieces' op names (each a pickled frame, :func:`_packed`) on this process's
    :class:`Shelf`, each piece's names held as its (offset, length) there until the critical
    path's rows are made a chunk of paths at a time (:func:`_critical`): ~4 kB per piece that
    the driver does not hold (docs/benchmarks.md, "fifth round"). The file is removed when
    closed."""

    def __init__(self) -> None:
        self.shelf = Shelf()

    def __enter__(self) -> _Names:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shelf.close()

    def put(self, data: bytes) -> Ref:
        return self.shelf.put(data)

    def get(self, ref: Ref) -> pl.DataFrame:
        return pickle.loads(self.shelf.get(ref))  # type: ignore[no-any-return]


def _critical(paths: list[gm.Path], notes: list[str], measured: bool, names: _Names) -> CriticalPathResult:
    """``graph_merge.critical_from`` of ``paths`` (in their order), :data:`PATH_CHUNK` paths at a
    time, each chunk's op names (pickled by the walk, a frame per piece) unpickled for its rows and
    released once they are made:
    the rows of every path at once cost the driver ~45 kB per path (+47 MiB at 1,024 DLRM ranks,
    docs/benchmarks.md "fourth round"). The rows are the same rows in the same order."""
    done = []
    for i in range(0, max(1, len(paths)), PATH_CHUNK):
        chunk = paths[i : i + PATH_CHUNK]
        for p in chunk:  # the names as the walk stored them (_Names.put)
            p.names = [names.get(ref) for ref in p.names]
        done.append(gm.critical_from(chunk, notes, measured))
        for p in chunk:
            p.names = []
    if len(done) == 1:
        return done[0]
    return dataclasses.replace(
        done[0],
        paths=pl.concat([d.paths for d in done], rechunk=True),
        top_ops=pl.concat([d.top_ops for d in done], rechunk=True),
    )


def _paths(
    summaries: gf.Summaries, options: AnalyzeOptions
) -> tuple[list[gm.Path], list[tuple[gm.Path, int, int]]]:
    """The critical paths to walk (each rank's windows, and the job's) and where each starts. A
    step's own window is walked only with ``--per-step``: without, ``keep_steps`` drops its rows
    (each path's rows are its own), and walking it cost as much as the whole window's path."""
    if not options.critical_path:
        return [], []
    cp_paths: list[gm.Path] = []
    starts: list[tuple[gm.Path, int, int]] = []  # (path, rank, end point)
    whole: list[tuple[int, int, int, int]] = []  # (rank, end point, end time, start time)
    for r, targets in summaries.targets:
        for step, sink, _w0, w0_t, sink_t in targets:
            if step is not None and not options.per_step:
                continue
            p = gm.Path("rank", r, step, w0_t, sink_t)
            cp_paths.append(p)
            starts.append((p, r, sink))
            if step is None:
                whole.append((r, sink, sink_t, w0_t))
    if len(whole) > 1:
        r, sink, sink_t, _ = max(whole, key=lambda w: w[2])
        job = gm.Path("job", None, None, min(w[3] for w in whole), sink_t)
        cp_paths.append(job)
        starts.append((job, r, sink))
    return cp_paths, starts


def _walk(
    graphs: Any,
    by_rank: dict[int, int],
    starts: list[tuple[gm.Path, int, int]],
    who: np.ndarray,
    names: _Names,
) -> None:
    """Walk every path back, one round per rank crossed: each rank walks its pieces and sends
    their first 4 x TOP ops by time (enough for a path's top ops unless it crosses a rank twice:
    then that rank's pieces are walked again with all their ops)."""
    paths = [p for p, _, _ in starts]
    reqs: list[list[tuple[int, int | None, int | None, int]]] = [[] for _ in paths]  # (rank, start, V, stop)
    todo: dict[int, list[tuple[int, int, int | None, int | None, int, bool]]] = {}
    for i, (p, r, sink) in enumerate(starts):
        todo.setdefault(r, []).append((i, 0, sink, None, p.start_ns, False))
        reqs[i].append((r, sink, None, p.start_ns))
    trunc: dict[tuple[int, int], bool] = {}
    nxt: dict[int, list[tuple[int, int, int | None, int | None, int, bool]]] = {}

    def arrived(i: int, j: int, w: rgm.Walked) -> None:
        p = paths[i]
        gm.add_piece(p, w.piece)
        p.names.append(names.put(w.names))
        trunc[(i, j)] = w.truncated
        if w.exit_v is not None:
            q = int(who[w.exit_v])
            reqs[i].append((q, None, w.exit_v, p.start_ns))
            nxt.setdefault(q, []).append((i, j + 1, None, w.exit_v, p.start_ns, False))

    while todo:
        _gather_walks(graphs, by_rank, todo, arrived)
        todo, nxt = nxt, {}
    again: dict[int, list[tuple[int, int, int | None, int | None, int, bool]]] = {}
    for i, rq in enumerate(reqs):
        seen = [r for r, _, _, _ in rq]
        for j, (r, start, v, stop) in enumerate(rq):
            if seen.count(r) > 1 and trunc.get((i, j)):
                again.setdefault(r, []).append((i, j, start, v, stop, True))

    def rewalked(i: int, j: int, w: rgm.Walked) -> None:
        paths[i].names[j] = names.put(w.names)

    _gather_walks(graphs, by_rank, again, rewalked)


def _gather_walks(graphs: Any, by_rank: dict[int, int], todo: dict[int, list], each: Any) -> None:
    """Each rank of ``todo`` walks its pieces; ``each(path, piece number, piece)`` of every piece
    as its batch of ranks is gathered, the batch let go before the next arrives (not every
    rank's pieces gathered at once)."""
    if not todo:
        return

    def batch(got: list[list[tuple[int, int, rgm.Walked]]]) -> list[Any]:
        for res in got:
            for i, j, w in res:
                each(i, j, w)
        return []

    rs = sorted(todo)
    graphs.walk([by_rank[r] for r in rs], [todo[r] for r in rs], batch)
