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
from charllm_trace.converters.kineto_profile import KinetoProfile
from charllm_trace.converters.lone_collectives import context_key, lone_device_work
from charllm_trace.core.errors import InputError
from charllm_trace.core.limits import MAX_RANK
from charllm_trace.core.model import ATTR_TENSOR_GROUP

#: IO info of a node used for collective sizes: (shapes, types, values) lists.
IO = tuple[Any, Any, Any]

_ROOT_ARG = {"broadcast": 2, "reduce": 3, "gather": 3, "scatter": 3}
_PEER_ARG = {"send": 2, "recv": 2}


def kineto_io(args: dict[str, Any] | None) -> IO:
    if not args:
        return None, None, None
    return args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs")


def _attach(ev: pl.DataFrame, narrow: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """Add ``cols`` of ``narrow`` (keyed by ``id``) to ``ev`` without copying ev's other columns
    (a join would gather every column of the wide table)."""
    got = ev.select("id").join(narrow.select("id", *cols), on="id", how="left", maintain_order="left")
    return ev.with_columns([got[c] for c in cols])


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

    def ancestors(self, i: int, limit: int = 128) -> list[int]:
        out = []
        p = int(self.parent[i]) if 0 <= i < len(self.parent) else -1
        while p >= 0 and len(out) < limit:
            out.append(p)
            p = int(self.parent[p])
        return out


def _marked_group(tree: _Tree, starts: list[int]) -> str | None:
    """The group named by the innermost ``charllm_pg:<name>`` range around one of ``starts``
    (``collectors/pg_hook.py`` wraps each collective call in one)."""
    for s in starts:
        for a in [s, *tree.ancestors(s)] if s >= 0 else []:
            name = tree.name_of(a) or ""
            if name.startswith(C.PG_MARK):
                return name[len(C.PG_MARK) :] or None
    return None


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


def _tensor_group(
    info: dict[str, Any], ctype: str | None, c10d_type: str | None, c10d_io: IO | None
) -> int | None:
    """The group size implied by the op's own element counts: the comm args' In/Out msg nelems,
    else the input and output tensors of its c10d op (``c10d::_allgather_base_(output, input)``,
    ``allgather_(outputs, inputs)``, ``_reduce_scatter_base_(output, input)``, ...)."""
    if ctype not in ("all_gather", "reduce_scatter"):
        return None
    tg = C.group_from_counts(ctype, info.get("in_nelems"), info.get("out_nelems"))
    if tg is None and c10d_io is not None and c10d_type == ctype and isinstance(c10d_io[0], list):
        shapes, types, _ = c10d_io
        types = types if isinstance(types, list) else []
        out_n, _ = C.first_tensor(shapes[:1], types[:1])
        in_n, _ = C.first_tensor(shapes[1:], types[1:])
        tg = C.group_from_counts(ctype, in_n, out_n)
    return tg


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
    ids = ev["id"].to_numpy()
    parents = ev["parent"].fill_null(-1).to_numpy()
    tree = _Tree(ids, parents, ev["name"])
    kinds = ev["kind"]
    name_s = ev["name"]
    cand = ev.select("id", "name", "kind", "on_gpu", "start_ns", "_rt_id", "tid").filter(
        ((kinds == "kernel") & _contains(name_s, r"(?i)nccl|rccl|msccl|hccl"))
        | (~pl.col("on_gpu") & (name_s.str.starts_with("gloo:") | name_s.str.starts_with("hccl:")))
    )

    def node_io(i: int) -> IO:
        if i in io:
            return io[i]
        return kineto_io(comm_args.get(i))

    gloo_c10d = _gloo_launches(ev, cand, tree)
    # the context of every candidate at once: a kernel's is its runtime launch's, a gloo op's its own
    with_args = np.zeros(len(tree.parent), dtype=bool)  # by id
    keyed = [i for i in comm_args if C.has_collective_args(comm_args[i])] + list(io)
    with_args[[i for i in keyed if 0 <= i < len(with_args)]] = True
    kernel = (cand["kind"] == "kernel").to_numpy()
    starts = np.where(kernel, cand["_rt_id"].fill_null(-1).to_numpy(), cand["id"].to_numpy())
    flags = _context_flags(name_s, with_args)
    ctx_rpc, ctx_ann, ctx_c10d = _contexts(tree, starts, flags)
    # an hccl: op is the collective itself only when no device kernel ran under it (else it is
    # that kernel's annotation, as nccl: is)
    hccl = ~kernel & cand["name"].str.starts_with("hccl:").to_numpy()
    if hccl.any():
        keep = ~(hccl & np.isin(cand["id"].to_numpy(), ctx_ann[kernel]))
        if not keep.all():
            cand, kernel, starts = cand.filter(pl.Series(keep)), kernel[keep], starts[keep]
            ctx_rpc, ctx_ann, ctx_c10d = ctx_rpc[keep], ctx_ann[keep], ctx_c10d[keep]

    # collectives whose only device work is a copy or a non-library kernel (a one-rank communicator)
    lone, lone_ctx, several = lone_device_work(
        ev,
        cand["id"].to_numpy(),
        context_key([ctx_rpc, ctx_ann, ctx_c10d]),
        lambda st: _contexts(tree, st, flags),
    )
    lone_ids = set(lone["id"].to_list())
    if lone_ids:
        cand = pl.concat([cand, lone])
        ctx_rpc, ctx_ann, ctx_c10d = (
            np.r_[a, b] for a, b in zip((ctx_rpc, ctx_ann, ctx_c10d), lone_ctx, strict=True)
        )
    c10d_ids = set(gloo_c10d.values())
    c10d_start = (
        dict(ev.select("id", "start_ns").filter(pl.col("id").is_in(list(c10d_ids))).iter_rows())
        if c10d_ids
        else {}
    )
    rows: list[dict[str, Any]] = []
    unknown_type = 0
    contexts = zip(ctx_rpc.tolist(), ctx_ann.tolist(), ctx_c10d.tolist(), strict=True)
    for r, (c_rpc, c_ann, c_c10d) in zip(cand.iter_rows(named=True), contexts, strict=True):
        i = r["id"]
        rec: dict[str, Any] = {"id": i}
        args = comm_args.get(i) or {}
        ctx = {k: v for k, v in (("rpc", c_rpc), ("ann", c_ann), ("c10d", c_c10d)) if v >= 0}
        on_host = not r["on_gpu"]
        if on_host:
            c = gloo_c10d.get(i)
            if c is not None:
                ctx.setdefault("c10d", c)
                for a in [c, *tree.ancestors(c)]:
                    if tree.name_of(a) == "record_param_comms" and C.has_collective_args(comm_args.get(a)):
                        ctx.setdefault("rpc", a)
                        break
        # The node's own type: its own comm args, else its own name (gloo:all_reduce, a kernel named
        # ..._AllReduce_...). The enclosing ops' type (record_param_comms args, c10d:: op, nccl:
        # annotation) only types a node whose own name names no collective (a SendRecv kernel): a
        # reduce_scatter that gloo runs as a gloo:all_reduce is an all_reduce here.
        own_type = (C.coll_type_of(args.get("Collective name")) if args else None) or (
            None if i in lone_ids else C.coll_type_of(r["name"])
        )
        c10d_type = C.coll_type_of(tree.name_of(ctx["c10d"])) if "c10d" in ctx else None
        ctype = (
            own_type
            or (
                C.coll_type_of(comm_args.get(ctx["rpc"], {}).get("Collective name")) if "rpc" in ctx else None
            )
            or c10d_type
            or (C.coll_type_of(tree.name_of(ctx["ann"])) if "ann" in ctx else None)
        )
        if C.has_collective_args(args):
            info = C.from_args(args, ctype)
            info["size_source"] = "kernel_args"
        elif "rpc" in ctx and C.has_collective_args(comm_args.get(ctx["rpc"])):
            info = C.from_args(comm_args[ctx["rpc"]], ctype, own_type=own_type)
            info["size_source"] = "record_param_comms_args"
        else:
            info = {"coll_type": ctype}
            # Sizes from the op's own inputs: the gloo op, or the nccl:/rccl: annotation.
            src = i if on_host else ctx.get("ann")
            n_in, ty = (None, None)
            if src is not None:
                shapes, types, _ = node_io(src)
                n_in, ty = C.first_tensor(shapes, types)
            c10d_out = None
            if "c10d" in ctx and ctype in ("all_gather", "gather"):
                shapes, types, _ = node_io(ctx["c10d"])
                # the output (first argument) only: the input would give the per-rank size
                c10d_out, ty2 = C.first_tensor(
                    shapes[:1] if isinstance(shapes, list) else None,
                    types[:1] if isinstance(types, list) else None,
                )
                ty = ty or ty2
            if n_in is None and "c10d" in ctx and ctype not in ("all_gather", "gather"):
                shapes, types, _ = node_io(ctx["c10d"])
                # c10d::alltoall_base_ / _reduce_scatter_base_ (output, input, ...): the input
                skip_out = c10d_type in ("all_to_all", "reduce_scatter")
                n_in, ty = C.first_tensor(
                    shapes[1:] if skip_out and isinstance(shapes, list) else shapes,
                    types[1:] if skip_out and isinstance(types, list) else types,
                )
            dt, size = C.dtype_info(ty)
            info["dtype"] = dt
            info["in_nelems"] = n_in
            info["_c10d_out"] = c10d_out
            info["size_source"] = "inputs" if (n_in is not None or c10d_out is not None) else None
            info["_elem_size"] = size
        # Process group: the op's own, else the collector's range around the call (gloo records none)
        pg_name = info.get("pg_name") or _marked_group(tree, [ctx.get("c10d", -1), ctx.get("ann", -1), i])
        if pg_name is not None and pg_name not in pgs:
            pgs[pg_name] = {"desc": info.get("pg_desc"), "ranks": info.get("pg_ranks") or []}
        elif pg_name is not None:
            pgs[pg_name]["desc"] = pgs[pg_name]["desc"] or info.get("pg_desc")
            pgs[pg_name]["ranks"] = pgs[pg_name]["ranks"] or info.get("pg_ranks") or []
        if pg_name is None and len(pgs) == 1:
            pg_name = next(iter(pgs))
        rec["pg_name"] = pg_name
        ranks = pgs[pg_name]["ranks"] if pg_name in pgs else (info.get("pg_ranks") or [])
        gsize = (
            info.get("group_size")
            or (len(ranks) if ranks else None)
            or (pgs.get(pg_name, {}).get("size") if pg_name else None)
        )
        ctype = info.get("coll_type")
        if info.get("size_source") in ("inputs", None) and "num_elems" not in info:
            n_in = info.get("in_nelems")
            if ctype in ("all_gather", "gather"):
                n = info.get("_c10d_out") or (n_in * gsize if (n_in is not None and gsize) else None)
            else:
                n = C.comm_nelems(ctype, n_in, n_in)
            info["num_elems"] = n
            size = info.get("_elem_size")
            info["comm_bytes"] = (
                0 if ctype == "barrier" else (n * size if (n is not None and size is not None) else None)
            )
        # all-to-all split sizes from c10d::alltoall_base_(output, input, pg, output_split_sizes,
        # input_split_sizes, ...) when the comm args did not give them.
        if (
            ctype == "all_to_all"
            and c10d_type == "all_to_all"
            and not info.get("in_split")
            and not info.get("out_split")
        ):
            _, _, values = node_io(ctx["c10d"])
            if isinstance(values, list) and len(values) > 4:
                info["out_split"] = C.parse_list(values[3]) or None
                info["in_split"] = C.parse_list(values[4]) or None
        # Root / peer from the c10d op's scalar inputs (group ranks -> global ranks), where the c10d
        # op is the same operation (its signature gives the argument's position).
        root = peer = None
        if c10d_type == ctype and ctype in {**_ROOT_ARG, **_PEER_ARG}:
            _, _, values = node_io(ctx["c10d"])
            idx = _ROOT_ARG.get(ctype, _PEER_ARG.get(ctype))
            if isinstance(values, list) and idx is not None and idx < len(values):
                g = C.as_int(values[idx])
                if g is not None:
                    glob = ranks[g] if ranks and 0 <= g < len(ranks) else g
                    if ctype in _ROOT_ARG:
                        root = glob
                    else:
                        peer = glob
        tg = _tensor_group(info, ctype, c10d_type, node_io(ctx["c10d"]) if "c10d" in ctx else None)
        if tg is not None:  # the group size the op's own tensors imply, kept in its attrs
            comm_args.setdefault(i, {})[ATTR_TENSOR_GROUP] = tg
        if ctype is None:
            unknown_type += 1
        rec.update(
            node_type=C.node_type_of(ctype),
            coll_type=ctype,
            comm_bytes=info.get("comm_bytes"),
            dtype=None if ctype == "barrier" else info.get("dtype"),
            num_elems=info.get("num_elems"),
            coll_seq=info.get("coll_seq"),
            root=root,
            peer=peer,
            in_split=info.get("in_split"),
            out_split=info.get("out_split"),
            _size_source=info.get("size_source"),
            _c10d=ctx.get("c10d") if on_host else None,
            # issue order: a gloo op is ordered by the c10d op that enqueued it
            _start=c10d_start.get(ctx.get("c10d", -1), r["start_ns"]) if on_host else r["start_ns"],
        )
        rows.append(rec)
    report: dict[str, Any] = {"comm_nodes": len(rows), "comm_unknown_type": unknown_type}
    if lone_ids or several:
        report["comm_lone_device_ops"] = len(lone_ids)
        report["comm_contexts_several_device_ops"] = several
    if not rows:
        return ev, report, pgs
    _check_sizes(rows, prof.path, bool(io))
    cf = pl.DataFrame(
        rows,
        schema={
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
        },
    )
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
    # gloo: the async op is launched by its c10d op.
    launch = cf.filter(pl.col("_c10d").is_not_null()).select("id", pl.col("_c10d").alias("_gloo_launch"))
    cf = cf.drop("_size_source", "_c10d", "_start")
    cf = cf.rename({"node_type": "_nt"})
    ev = ev.drop([c for c in cf.columns if c not in ("id", "_nt") and c in ev.columns])
    ev = _attach(ev, cf, [c for c in cf.columns if c != "id"])
    ev = ev.with_columns(pl.coalesce("_nt", "node_type").alias("node_type")).drop("_nt")
    if launch.height:
        ev = _attach(ev, launch, ["_gloo_launch"])
        ev = ev.with_columns(pl.coalesce("launch_id", "_gloo_launch").alias("launch_id")).drop("_gloo_launch")
    return ev, report, pgs
