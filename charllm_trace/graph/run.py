"""One graph for a whole run: every rank's point graph, joined at collectives.

A collective instance is matched across ranks by (process group, sequence number), as
the bandwidth analysis matches it. Each rank's instance node is the one that ends last
among the rank's nodes with that (group, sequence): the communication kernel on a GPU,
the gloo op on a CPU. For each instance a virtual point *V* stands for "every rank has
arrived": an edge from each participant's start to V, and from V to each participant's
end with the transfer time as lag. The transfer time is the shortest duration among
the participants (the last rank to arrive waits least); each participant's own span is
cut to it, so a participant ends at max(its start, the last arrival) + transfer, and the
rest of its measured duration is waiting for peers. Calibration then works on the merged
graph as on one rank's (``points.calibrate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from charllm_trace.core.classify import classify
from charllm_trace.core.model import Run, Trace
from charllm_trace.graph import points as P


@dataclass
class RunGraph:
    """The merged graph. Point ``p`` of rank ``r`` is ``offsets[r] + p``; virtual points follow."""

    g: P.PointGraph  # merged arrays (owner indexes ``owner_rank``'s active nodes)
    ranks: list[int]
    offsets: dict[int, int]
    parts: dict[int, P.PointGraph]  # per-rank graphs (their arrays as built, before merging)
    point_rank: np.ndarray  # rank of each point (-1: virtual)
    owner_rank: np.ndarray  # rank of each edge's owner node
    n_collectives: int = 0
    notes: list[str] = field(default_factory=list)


def instances(trace: Trace, nodes: pl.DataFrame, part: P.PointGraph) -> pl.DataFrame:
    """(pg_name, coll_seq, point index of start ``_i``, its start and end times ``_s``, ``_e``) of
    this rank's collective instances."""
    act = nodes[part.rows] if len(part.rows) < nodes.height else nodes
    df = act.with_columns(
        _i=pl.int_range(pl.len(), dtype=pl.Int64), pg_name=pl.col("pg_name").fill_null("")
    ).filter(
        pl.col("coll_seq").is_not_null()
        & (pl.col("cls").is_in(["comm", "cpu_comm"]))
        & pl.col("coll_type").is_not_null()
    )
    schema = {"pg_name": pl.String, "coll_seq": pl.Int64, "_i": pl.Int64, "_s": pl.Int64, "_e": pl.Int64}
    if df.height == 0:
        return pl.DataFrame(schema=schema)
    t = part.time
    i = df["_i"].to_numpy()
    return (
        df.with_columns(_s=pl.Series(t[2 * i], dtype=pl.Int64), _e=pl.Series(t[2 * i + 1], dtype=pl.Int64))
        .with_columns(_dur=pl.col("_e") - pl.col("_s"))
        .sort(["_e", "_dur"], descending=[True, False])
        .unique(subset=["pg_name", "coll_seq"], keep="first")
        .select(list(schema))
    )


def match_instances(frames: list[pl.DataFrame]) -> tuple[pl.DataFrame, list[str]]:
    """Every rank's :func:`instances` (with a ``rank`` column) matched across ranks by (group,
    sequence): the instances at least two ranks hold, whose participants overlap in time, in
    (rank, point) order, with their virtual point ``_v`` (0, 1, ... in (group, sequence) order),
    its transfer time ``_tr`` (the shortest participant, at least 0) and its time ``_vt`` (the
    last arrival). Also the note on instances not joined. The local graph (``build_run_graph``)
    and the Dask driver (``engine/graph_step.py``) both match with this."""
    notes: list[str] = []
    empty = pl.DataFrame(
        schema={
            "pg_name": pl.String,
            "coll_seq": pl.Int64,
            "_i": pl.Int64,
            "_s": pl.Int64,
            "_e": pl.Int64,
            "rank": pl.Int64,
            "_v": pl.Int64,
            "_tr": pl.Int64,
            "_vt": pl.Int64,
        }  # fmt: skip
    )
    if not frames:
        return empty, notes
    inst = pl.concat(frames).with_columns(_n=pl.len().over(["pg_name", "coll_seq"])).filter(pl.col("_n") >= 2)
    if inst.height:
        # participants of one instance run at one time: every start before every end (else the
        # match is wrong, e.g. sampled ranks that were not peers, or clocks that disagree)
        ok = inst.group_by(["pg_name", "coll_seq"]).agg(_ok=pl.col("_s").max() <= pl.col("_e").min())
        bad = ok.filter(~pl.col("_ok"))
        if bad.height:
            notes.append(
                f"{bad.height} collective instances matched by (group, sequence) were not joined across "
                "ranks: one rank's op ended before another's started (not peers, or clocks that disagree)"
            )
            inst = inst.join(
                ok.filter(pl.col("_ok")).select("pg_name", "coll_seq"), on=["pg_name", "coll_seq"]
            )
    if inst.height == 0:
        return empty, notes
    # rank order: the order of the collective edges (on equal arrival times, the later edge binds)
    inst = (
        inst.sort(["rank", "_i"])
        .with_columns(_v=pl.struct("pg_name", "coll_seq").rank("dense").cast(pl.Int64) - 1)
        .with_columns(
            _tr=(pl.col("_e") - pl.col("_s")).min().over("_v").clip(lower_bound=0),
            _vt=pl.col("_s").max().over("_v"),
        )
    )
    return inst.select(empty.columns), notes


def collective_edges(
    rank: np.ndarray, li: np.ndarray, v: np.ndarray, tr_each: np.ndarray, gstart: np.ndarray
) -> dict[str, np.ndarray]:
    """The edges joining participants' points ``gstart`` (start; ``gstart + 1`` the end) to their
    instances' virtual points ``v``: start -> V, then V -> end with the transfer time as lag."""
    k = len(v)
    return {
        "src": np.concatenate([gstart, v]),
        "dst": np.concatenate([v, gstart + 1]),
        "base": np.concatenate([np.zeros(k, np.int64), tr_each]),
        "cat": np.concatenate(
            [np.full(k, P.CAT["sync_wait"], np.int8), np.full(k, P.CAT["communication"], np.int8)]
        ),
        "wclass": np.concatenate([np.full(k, -1, np.int8), np.full(k, P.WC["comm"], np.int8)]),
        "owner": np.concatenate([np.full(k, -1, np.int64), li]),
        "orank": np.concatenate([rank, rank]),
    }


def cut_spans(p: P.PointGraph, li: np.ndarray, tr: np.ndarray) -> None:
    """Cut each participant's own span (its nodes ``li``) to the transfer time ``tr`` (the rest is
    waiting for peers)."""
    is_span = p.kind == P.EK["span"]
    ends = 2 * li + 1
    order = np.argsort(ends)
    se, st = ends[order], tr[order]
    e = np.flatnonzero(is_span & np.isin(p.dst, se))
    k = np.searchsorted(se, p.dst[e])
    p.base[e] = np.minimum(p.base[e], st[k])


def build_run_graph(run: Run, classified: dict[int, pl.DataFrame] | None = None) -> RunGraph:
    """The merged, calibrated graph of every rank of ``run`` (see the module docstring)."""
    ranks = run.ranks
    parts, cls_nodes = _rank_parts(run, classified)
    measured = all(p.measured for p in parts.values())
    offsets: dict[int, int] = {}
    off = 0
    for r in ranks:
        offsets[r] = off
        off += parts[r].n_points
    n_real = off
    inst, notes, ce, n_virtual = _collectives(run, parts, cls_nodes, offsets, n_real, measured)
    single = len(ranks) == 1 and not ce
    merged, owner_rank, point_rank = _merged(ranks, parts, offsets, ce, n_real, n_virtual, single, measured)
    if n_virtual:  # a virtual point's time: the last arrival
        merged.time[n_real + inst["_v"].to_numpy()] = inst["_vt"].to_numpy()
    owner_rank = owner_rank[break_cycles(merged, notes)]
    if measured:
        P.calibrate(merged)
    if single:  # the rank's edge arrays are the run's (calibrated, cycles broken): no second copy
        part = parts[ranks[0]]
        for name in ("src", "dst", "base", "fixed", "wclass", "kind", "cat", "owner", "prio"):
            setattr(part, name, getattr(merged, name))
    for r in ranks:
        for note in parts[r].notes:
            notes.insert(0, f"rank {r}: {note}" if len(ranks) > 1 else note)
    return RunGraph(
        g=merged,
        ranks=ranks,
        offsets=offsets,
        parts=parts,
        point_rank=point_rank,
        owner_rank=owner_rank,
        n_collectives=n_virtual,
        notes=notes,
    )


def _rank_parts(
    run: Run, classified: dict[int, pl.DataFrame] | None
) -> tuple[dict[int, P.PointGraph], dict[int, pl.DataFrame]]:
    """Each rank's point graph (not calibrated yet) and classified nodes."""
    parts: dict[int, P.PointGraph] = {}
    cls_nodes: dict[int, pl.DataFrame] = {}
    for r in run.ranks:
        tr = run.traces[r]
        cn = classified.get(r) if classified else None
        cn = cn if cn is not None and "cls" in cn.columns else classify(tr.nodes)
        cls_nodes[r] = cn
        parts[r] = P.build(tr, cn, calibrated=False)
    return parts, cls_nodes


def _collectives(
    run: Run,
    parts: dict[int, P.PointGraph],
    cls_nodes: dict[int, pl.DataFrame],
    offsets: dict[int, int],
    n_real: int,
    measured: bool,
) -> tuple[pl.DataFrame, list[str], dict[str, np.ndarray], int]:
    """The collective instances matched across ranks, their notes, the edges through one virtual
    point per instance, and the number of those points; the matched ops' spans are cut."""
    ranks = run.ranks
    inst_frames = []
    if measured and len(ranks) > 1:
        for r in ranks:
            f = instances(run.traces[r], cls_nodes[r], parts[r])
            if f.height:
                inst_frames.append(f.with_columns(rank=pl.lit(r, dtype=pl.Int64)))
    inst, notes = match_instances(inst_frames)
    ce: dict[str, np.ndarray] = {}
    n_virtual = 0
    if inst.height:
        n_virtual = int(inst["_v"].max()) + 1
        rk = inst["rank"].to_numpy()
        li = inst["_i"].to_numpy()
        tr_each = inst["_tr"].to_numpy()
        gstart = np.array([offsets[int(x)] for x in rk], dtype=np.int64) + 2 * li
        ce = collective_edges(rk, li, inst["_v"].to_numpy() + n_real, tr_each, gstart)
        for r in ranks:
            sel = rk == r
            if sel.any():
                cut_spans(parts[r], li[sel], tr_each[sel])
    return inst, notes, ce, n_virtual


def _merged(
    ranks: list[int],
    parts: dict[int, P.PointGraph],
    offsets: dict[int, int],
    ce: dict[str, np.ndarray],
    n_real: int,
    n_virtual: int,
    single: bool,
    measured: bool,
) -> tuple[P.PointGraph, np.ndarray, np.ndarray]:
    """The ranks' graphs and the collective edges as one graph (point indexes shifted by each
    rank's offset, virtual points last), with each edge's and each point's rank."""

    def coll(name: str) -> list[np.ndarray]:
        return [ce[name]] if ce else []

    coll_src = coll("src")

    def cat(attr: str, extra: list[np.ndarray], shift: bool) -> np.ndarray:
        if single:  # one rank, nothing added: its arrays are the run's (no copy)
            return getattr(parts[ranks[0]], attr)
        arrs = [getattr(parts[r], attr) + (offsets[r] if shift else 0) for r in ranks]
        return np.concatenate(arrs + extra) if (arrs or extra) else np.zeros(0, np.int64)

    def per_edge(attr: str, value: int) -> np.ndarray:  # the collective edges' kind or priority
        if single:
            return cat(attr, [], False)
        tail = [np.full(len(x), value, np.int8) for x in coll_src]
        return np.concatenate([getattr(parts[r], attr) for r in ranks] + tail).astype(np.int8)

    src = cat("src", coll_src, True).astype(np.int32, copy=False)
    time = (
        parts[ranks[0]].time
        if single
        else np.concatenate([parts[r].time for r in ranks] + [np.zeros(n_virtual, np.int64)])
    )
    root = (
        parts[ranks[0]].root
        if single
        else np.concatenate([parts[r].root for r in ranks] + [np.full(n_virtual, np.iinfo(np.int64).min)])
    )
    owner_rank = np.concatenate(
        [np.full(len(parts[r].src), r, np.int32) for r in ranks] + [x.astype(np.int32) for x in coll("orank")]
    )
    point_rank = np.concatenate(
        [np.full(parts[r].n_points, r, np.int32) for r in ranks] + [np.full(n_virtual, -1, np.int32)]
    )
    merged = P.PointGraph(
        n_points=n_real + n_virtual,
        time=time,
        root=root,
        src=src,
        dst=cat("dst", coll("dst"), True).astype(np.int32, copy=False),
        base=cat("base", coll("base"), False),
        fixed=np.zeros(len(src), dtype=np.int64),
        wclass=cat("wclass", coll("wclass"), False).astype(np.int8, copy=False),
        kind=per_edge("kind", P.EK["collective"]),
        cat=cat("cat", coll("cat"), False).astype(np.int8, copy=False),
        owner=cat("owner", coll("owner"), False).astype(np.int32, copy=False),
        prio=per_edge("prio", P.PRIO_CROSS),
        rows=np.zeros(0, np.int64),
        ids=np.zeros(0, np.int64),
        rank=None,
        notes=[],
        measured=measured,
    )
    return merged, owner_rank, point_rank


def break_cycles(g: P.PointGraph, notes: list[str]) -> np.ndarray:
    """Drop tensor-data edges that close dependency cycles (the only edges not implied by a lane's
    order, a launch or a measured wait), with a note. Returns the mask of edges kept; a cycle
    without data edges is left to the caller (``engine.CycleError`` when re-timed)."""
    from charllm_trace.core import dag as engine

    kept = np.ones(len(g.src), dtype=bool)
    while True:
        zero = np.zeros(len(g.src), np.int64)
        time, _, done = engine.longest_path(g.n_points, g.src, g.dst, zero, g.prio, g.root)
        if done == g.n_points:
            break
        # on a cycle (or between two): not reached going forward from the sources, nor going
        # backward from the sinks (points merely downstream or upstream of a cycle are reached)
        fwd, _, _ = engine.longest_path(
            g.n_points, g.src, g.dst, zero, g.prio, np.zeros(g.n_points, np.int64)
        )
        bwd, _, _ = engine.longest_path(
            g.n_points, g.dst, g.src, zero, g.prio, np.zeros(g.n_points, np.int64)
        )
        stuck = (fwd == engine.NONE) & (bwd == engine.NONE)
        drop = (g.kind == P.EK["data"]) & stuck[g.src] & stuck[g.dst]
        if not drop.any():
            break
        idx = np.flatnonzero(kept)
        kept[idx[drop]] = False
        for name in ("src", "dst", "base", "fixed", "wclass", "kind", "cat", "owner", "prio"):
            setattr(g, name, getattr(g, name)[~drop])
    if not kept.all():
        what = "tensor data" if g.measured else "recorded"
        notes.append(f"{int((~kept).sum())} {what} dependencies were on dependency cycles and were not used")
    return kept
