"""Collective columns of communication nodes (``annotate_collectives``).

A communication node (an NCCL/RCCL kernel, a ``gloo:`` op) gets its type, message size, dtype,
process group, sequence number, root/peer and all-to-all splits from its own comm args, else from
the enclosing ``record_param_comms`` (with args), ``c10d::`` op or ``nccl:`` annotation found among
its ancestors (a kernel: the ancestors of its runtime launch); async gloo ops are matched to the
``c10d::`` ops that enqueued them. An all_gather's or reduce_scatter's group size implied by its
own tensors (output / input elements) is added to its ``attrs`` as ``tensor_group_size``. An
``hccl:`` op is a collective itself unless a device kernel ran under it (then it is that kernel's
annotation, as ``nccl:`` is). Rules: docs/converters.md, "Collectives".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from charllm_trace.converters import collectives as C
from charllm_trace.converters.collective_rows import IO, RowInputs, collective_row, kineto_io, mark_starts
from charllm_trace.converters.kineto_profile import KinetoProfile
from charllm_trace.converters.lone_collectives import context_key, lone_device_work
from charllm_trace.core.errors import InputError
from charllm_trace.core.limits import MAX_RANK

__all__ = ["IO", "annotate_collectives", "kineto_io"]


def _attach(ev: pl.DataFrame, narrow: pl.DataFrame, cols: list[str], pos: np.ndarray) -> pl.DataFrame:
    """Add ``cols`` of ``narrow`` (keyed by ``id``, unique) to ``ev``, null on the other rows:
    gathered by position (``pos``: id -> row of ``ev``, the tree's), neither a join that hashes
    the whole table nor a copy of ev's other columns."""
    idx = np.full(ev.height, -1, dtype=np.int64)
    idx[pos[narrow["id"].to_numpy()]] = np.arange(narrow.height, dtype=np.int64)
    take = pl.Series(idx)
    take = pl.select(pl.when(take >= 0).then(take)).to_series()
    return ev.with_columns([narrow[c].gather(take).alias(c) for c in cols])


def _contains(s: pl.Series, pattern: str) -> pl.Series:
    """``s.str.contains(pattern)``, the regex run once per distinct value (names repeat a lot)."""
    u = s.unique()
    return s.is_in(u.filter(u.str.contains(pattern)).implode())


class _Tree:
    """Cheap ancestor walks over ids (ids are dense 0..n-1 row numbers here)."""

    def __init__(self, ids: np.ndarray, parents: np.ndarray, names: pl.Series) -> None:
        size = int(ids.max()) + 1 if len(ids) else 0
        self.parent = np.full(size, -1, dtype=np.int64)
        self.parent[ids] = parents
        self._names = names  # looked up on demand: only ancestors of communication nodes are visited
        self._cache: dict[int, str] = {}
        self.ids = ids
        self.pos = np.full(size, -1, dtype=np.int64)  # id -> row
        self.pos[ids] = np.arange(len(ids))

    def name_of(self, i: int) -> str:
        nm = self._cache.get(i)
        if nm is None:
            nm = self._cache[i] = self._names[int(self.pos[i])]
        return nm

    def prefetch(self, ids: np.ndarray) -> None:
        """Look up the names of ``ids`` (-1 skipped) in one gather: the per-node rows read them."""
        ids = np.unique(ids[(ids >= 0) & (ids < len(self.pos))])
        ids = ids[self.pos[ids] >= 0]
        self._cache.update(zip(ids.tolist(), self._names.gather(self.pos[ids]).to_list(), strict=True))

    def nearest_marks(self, starts: np.ndarray, limit: int = 128) -> dict[int, str]:
        """start id -> the name of the innermost ``charllm_pg:`` range among the start and its
        ancestors (up to ``limit``), for the starts that have one; all starts walk up together."""
        cur = np.unique(starts[(starts >= 0) & (starts < len(self.parent))])
        cur = cur[self.pos[cur] >= 0]
        origin = cur.copy()
        out: dict[int, str] = {}
        for _ in range(limit + 1):
            if not cur.size:
                break
            nm = self._names.gather(self.pos[cur])
            hit = nm.str.starts_with(C.PG_MARK).fill_null(False).to_numpy()
            if hit.any():
                out.update(zip(origin[hit].tolist(), nm.filter(pl.Series(hit)).to_list(), strict=True))
            up = self.parent[cur]
            keep = ~hit & (up >= 0)
            cur, origin = up[keep], origin[keep]
            cur_ok = self.pos[cur] >= 0
            cur, origin = cur[cur_ok], origin[cur_ok]
        return out

    def ancestors(self, i: int, limit: int = 128) -> list[int]:
        out = []
        p = int(self.parent[i]) if 0 <= i < len(self.parent) else -1
        while p >= 0 and len(out) < limit:
            out.append(p)
            p = int(self.parent[p])
        return out


def _pg_table(prof: KinetoProfile, extra_pgs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pgs: dict[str, dict[str, Any]] = {}
    ws = prof.world_size
    for p in list(prof.pg_config) + extra_pgs:
        name = p.get("pg_name")
        if name is None:
            continue
        name = str(name)
        ranks = C.parse_list(p.get("ranks")) or []
        size = C.as_int(p.get("pg_size", p.get("group_size")))
        if not ranks and size and ws and size == ws:
            ranks = list(range(size))  # torch writes [] for the default group: all ranks
        cur = pgs.setdefault(name, {"desc": None, "ranks": []})
        cur["desc"] = cur["desc"] or p.get("pg_desc")
        cur["ranks"] = cur["ranks"] or ranks
        if size and not cur.get("size"):
            cur["size"] = size
    return pgs


def _context_flags(names: pl.Series, with_args: np.ndarray) -> Any:
    """A function of node ids giving three flags for each: a record_param_comms with collective
    args (``with_args``, by id); an nccl:/rccl:/hccl: annotation; a c10d:: op that names a collective.
    Only the ids the walk visits are looked at (a few per communication node)."""

    def flags(idx: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nm = names.gather(pos[idx])
        c10d = nm.str.starts_with("c10d::").to_numpy()
        if c10d.any():
            c10d[c10d] = [C.coll_type_of(n) is not None for n in nm.filter(pl.Series(c10d)).to_list()]
        return (
            (nm == "record_param_comms").to_numpy() & with_args[idx],
            (
                nm.str.starts_with("nccl:") | nm.str.starts_with("rccl:") | nm.str.starts_with("hccl:")
            ).to_numpy(),
            c10d,
        )

    return flags


def _contexts(tree: _Tree, starts: np.ndarray, flags: Any, limit: int = 128) -> list[np.ndarray]:
    """For each start id (-1: none): the nearest record_param_comms with collective args, nccl:/rccl:
    annotation and collective c10d:: op among the start and its ancestors (up to ``limit``), -1
    where there is none. All starts walk up together, one level per step."""
    found = [np.full(len(starts), -1, dtype=np.int64) for _ in range(3)]
    cur = np.where((starts >= 0) & (starts < len(tree.parent)), starts, -1)
    for _ in range(limit + 1):
        live = np.flatnonzero(cur >= 0)
        if not live.size:
            break
        idx = cur[live]
        for fd, f in zip(found, flags(idx, tree.pos), strict=True):
            hit = live[f & (fd[live] < 0)]
            fd[hit] = cur[hit]
        cur[live] = tree.parent[idx]
    return found


def _gloo_launches(ev: pl.DataFrame, cand: pl.DataFrame, tree: _Tree) -> dict[int, int]:
    """gloo op id -> the c10d op that launched it. Async gloo ops run on worker threads: they are
    matched, in start order, to the c10d ops that enqueued them (issue order), skipping c10d ops
    whose gloo op ran inline under them."""
    gloo = cand.filter(pl.col("name").str.starts_with("gloo:")).sort("start_ns")
    gloo_c10d: dict[int, int] = {}
    if not gloo.height:
        return gloo_c10d
    inline = set()
    for gid in gloo["id"].to_list():
        for a in tree.ancestors(gid):
            if tree.name_of(a).startswith("c10d::"):
                gloo_c10d[gid] = a
                inline.add(a)
                break
    c10d = (
        ev.select("id", "name", "on_gpu", "start_ns")
        .filter(~pl.col("on_gpu") & pl.col("name").str.starts_with("c10d::"))
        .sort("start_ns")
    )
    c10d_all = [
        (i, C.coll_type_of(n))
        for i, n in zip(c10d["id"].to_list(), c10d["name"].to_list(), strict=True)
        if C.coll_type_of(n) and i not in inline
    ]
    gloo_all = [
        (i, C.coll_type_of(n))
        for i, n in zip(gloo["id"].to_list(), gloo["name"].to_list(), strict=True)
        if i not in gloo_c10d
    ]
    compatible = {("reduce_scatter", "all_reduce"), ("all_gather", "all_gather")}
    p2p = ("send", "recv")
    # Point-to-point and collectives are matched as two separate sequences.
    for want_p2p in (False, True):
        cs = [x for x in c10d_all if (x[1] in p2p) == want_p2p]
        gs = [x for x in gloo_all if (x[1] in p2p) == want_p2p]
        for (gid, gt), (cid, ct) in zip(gs, cs, strict=False):
            if gt != ct and (ct, gt) not in compatible:
                break  # order no longer trustworthy: stop matching here
            gloo_c10d[gid] = cid
    return gloo_c10d


#: the largest message size (bytes or elements) a collective may have: 2**50 (a pebibyte)
MAX_MESSAGE = 1 << 50


def _check_sizes(rows: list[dict[str, Any]], path: str, linked: bool) -> None:
    """Sizes, split sizes and ranks of the collectives are numbers a real job has (they come from
    the comm args or the host ET's input shapes: hostile values overflowed the int64 columns)."""
    for rec in rows:
        for key in ("comm_bytes", "num_elems"):
            v = rec.get(key)
            if v is not None and not 0 <= v <= MAX_MESSAGE:
                src = (
                    "the host ET's input shapes or the profile's comm args"
                    if linked
                    else "the profile's comm args"
                )
                raise InputError(
                    path,
                    f"collective {rec.get('coll_type') or '?'} (node {rec['id']}): {key} {v} is beyond any real message (from {src})",
                )
        for key in ("in_split", "out_split"):
            v = rec.get(key)
            if v and any(type(x) is not int or not 0 <= x <= MAX_MESSAGE for x in v):
                raise InputError(path, f"collective (node {rec['id']}): {key} holds a size no message has")
        for key in ("root", "peer"):
            v = rec.get(key)
            if v is not None and not 0 <= v < MAX_RANK:
                raise InputError(path, f"collective (node {rec['id']}): {key} rank {v} is outside any job")


def _candidates(ev: pl.DataFrame) -> pl.DataFrame:
    """The communication nodes: NCCL/RCCL/MSCCL/HCCL kernels, host ``gloo:`` and ``hccl:`` ops."""
    kinds = ev["kind"]
    name_s = ev["name"]
    return ev.select("id", "name", "kind", "on_gpu", "start_ns", "_rt_id", "tid").filter(
        ((kinds == "kernel") & _contains(name_s, r"(?i)nccl|rccl|msccl|hccl"))
        | (~pl.col("on_gpu") & (name_s.str.starts_with("gloo:") | name_s.str.starts_with("hccl:")))
    )


def _with_args(comm_args: dict[int, dict[str, Any]], io: dict[int, IO], n: int) -> np.ndarray:
    """By id: the node has collective comm args or overriding IO info."""
    with_args = np.zeros(n, dtype=bool)
    keyed = [i for i in comm_args if C.has_collective_args(comm_args[i])] + list(io)
    with_args[[i for i in keyed if 0 <= i < len(with_args)]] = True
    return with_args


def _candidate_contexts(cand: pl.DataFrame, tree: _Tree, flags: Any) -> tuple[pl.DataFrame, list[np.ndarray]]:
    """The context of every candidate at once (a kernel's is its runtime launch's, a gloo op's its
    own). An hccl: op is the collective itself only when no device kernel ran under it (else it is
    that kernel's annotation, as nccl: is): such ops are dropped."""
    kernel = (cand["kind"] == "kernel").to_numpy()
    starts = np.where(kernel, cand["_rt_id"].fill_null(-1).to_numpy(), cand["id"].to_numpy())
    ctxs = _contexts(tree, starts, flags)
    hccl = ~kernel & cand["name"].str.starts_with("hccl:").to_numpy()
    if hccl.any():
        keep = ~(hccl & np.isin(cand["id"].to_numpy(), ctxs[1][kernel]))
        if not keep.all():
            return cand.filter(pl.Series(keep)), [c[keep] for c in ctxs]
    return cand, ctxs


def _add_lone(
    ev: pl.DataFrame, cand: pl.DataFrame, ctxs: list[np.ndarray], tree: _Tree, flags: Any
) -> tuple[pl.DataFrame, list[np.ndarray], set[int], int]:
    """Add the collectives whose only device work is a copy or a non-library kernel (a one-rank
    communicator). Returns (candidates, contexts, lone ids, contexts with several device ops)."""
    lone, lone_ctx, several = lone_device_work(
        ev, cand["id"].to_numpy(), context_key(list(ctxs)), lambda st: _contexts(tree, st, flags)
    )
    lone_ids = set(lone["id"].to_list())
    if lone_ids:
        cand = pl.concat([cand, lone])
        ctxs = [np.r_[a, b] for a, b in zip(ctxs, lone_ctx, strict=True)]
    return cand, ctxs, lone_ids, several


def _c10d_starts(ev: pl.DataFrame, gloo_c10d: dict[int, int]) -> dict[int, int]:
    """Start of each c10d op that launched a gloo op."""
    c10d_ids = set(gloo_c10d.values())
    if not c10d_ids:
        return {}
    return dict(ev.select("id", "start_ns").filter(pl.col("id").is_in(list(c10d_ids))).iter_rows())


_ROW_SCHEMA = {
    "id": pl.Int64,
    "pg_name": pl.String,
    "node_type": pl.String,
    "coll_type": pl.String,
    "comm_bytes": pl.Int64,
    "dtype": pl.String,
    "num_elems": pl.Int64,
    "coll_seq": pl.Int64,
    "root": pl.Int32,
    "peer": pl.Int32,
    "in_split": pl.List(pl.Int64),
    "out_split": pl.List(pl.Int64),
    "_size_source": pl.String,
    "_c10d": pl.Int64,
    "_start": pl.Int64,
}


def _rows_frame(rows: list[dict[str, Any]], report: dict[str, Any]) -> pl.DataFrame:
    """The rows as a table in issue order, sequence numbers filled by ordinal per group where the
    args gave none; the report gets the sequence and size sources."""
    cf = pl.DataFrame(rows, schema=_ROW_SCHEMA)
    have_seq = cf["coll_seq"].is_not_null()
    report["coll_seq_source"] = "args" if have_seq.all() else ("ordinal" if not have_seq.any() else "mixed")
    cf = cf.sort("_start").with_columns(
        pl.coalesce(
            "coll_seq",
            pl.int_range(0, pl.len(), dtype=pl.Int64).over(pl.col("pg_name").fill_null("")),
        ).alias("coll_seq")
    )
    report["comm_size_sources"] = {str(k): int(v) for k, v in cf.group_by("_size_source").len().iter_rows()}
    report["comm_without_bytes"] = int(cf["comm_bytes"].is_null().sum())
    return cf


def _merge_rows(ev: pl.DataFrame, cf: pl.DataFrame, pos: np.ndarray) -> pl.DataFrame:
    """Put the collective columns on the events; gloo: the async op is launched by its c10d op."""
    launch = cf.filter(pl.col("_c10d").is_not_null()).select("id", pl.col("_c10d").alias("_gloo_launch"))
    cf = cf.drop("_size_source", "_c10d", "_start")
    cf = cf.rename({"node_type": "_nt"})
    ev = ev.drop([c for c in cf.columns if c not in ("id", "_nt") and c in ev.columns])
    ev = _attach(ev, cf, [c for c in cf.columns if c != "id"], pos)
    ev = ev.with_columns(pl.coalesce("_nt", "node_type").alias("node_type")).drop("_nt")
    if launch.height:
        ev = _attach(ev, launch, ["_gloo_launch"], pos)
        ev = ev.with_columns(pl.coalesce("launch_id", "_gloo_launch").alias("launch_id")).drop("_gloo_launch")
    return ev


def annotate_collectives(
    ev: pl.DataFrame,
    comm_args: dict[int, dict[str, Any]],
    prof: KinetoProfile,
    io: dict[int, IO] | None = None,
    extra_pgs: list[dict[str, Any]] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any], dict[str, dict[str, Any]]]:
    """Fill the collective columns on communication nodes. Returns (events, report, process groups).

    ``io`` overrides the (shapes, types, values) of a node (the host ET's inputs when linked);
    otherwise Kineto's ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` args are used.
    """
    io = io or {}
    pgs = _pg_table(prof, extra_pgs or [])
    tree = _Tree(ev["id"].to_numpy(), ev["parent"].fill_null(-1).to_numpy(), ev["name"])
    cand = _candidates(ev)
    gloo_c10d = _gloo_launches(ev, cand, tree)
    flags = _context_flags(ev["name"], _with_args(comm_args, io, len(tree.parent)))
    cand, ctxs = _candidate_contexts(cand, tree, flags)
    cand, ctxs, lone_ids, several = _add_lone(ev, cand, ctxs, tree, flags)
    found = list(zip(*(c.tolist() for c in ctxs), strict=True))
    ids, on_gpu = cand["id"].to_list(), cand["on_gpu"].to_list()
    starts = [mark_starts(f, not g, i, gloo_c10d) for f, g, i in zip(found, on_gpu, ids, strict=True)]
    marks = tree.nearest_marks(np.array(starts, dtype=np.int64).reshape(-1))
    tree.prefetch(np.concatenate([*ctxs, np.array(list(gloo_c10d.values()), dtype=np.int64)]))
    d = RowInputs(tree, comm_args, io, pgs, gloo_c10d, lone_ids, _c10d_starts(ev, gloo_c10d), marks)
    rows = [collective_row(d, r, f) for r, f in zip(cand.iter_rows(named=True), found, strict=True)]
    report: dict[str, Any] = {
        "comm_nodes": len(rows),
        "comm_unknown_type": sum(rec["coll_type"] is None for rec in rows),
    }
    if lone_ids or several:
        report["comm_lone_device_ops"] = len(lone_ids)
        report["comm_contexts_several_device_ops"] = several
    if not rows:
        return ev, report, pgs
    _check_sizes(rows, prof.path, bool(io))
    return _merge_rows(ev, _rows_frame(rows, report), tree.pos), report, pgs
