"""Assemble the trace model (:class:`~charllm_trace.model.Trace`) from a parsed Kineto profile,
optionally joined with a PyTorch host execution trace.

Node ids: in a Kineto-only conversion a node's id is its row in the profile's
table of complete events. When a host ET is linked, linked CPU ops take the host
ET node id and every other node gets an id above the host ET's largest.

``launch_id`` of a GPU node (kernel, memcpy, memset) is the CPU op that encloses
the runtime call (``cudaLaunchKernel``, ``hipMemcpyWithStream`` ...) whose
``correlation`` matches it; when the runtime call has no enclosing op (called
directly from a thread's top level) it is the runtime call itself. The runtime
call stays reachable through the shared ``correlation`` value. GPU nodes with no
runtime call fall back to the CPU op with the same ``External id``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import polars as pl

from charllm_trace.converters import collectives as C
from charllm_trace.converters.kineto import KinetoProfile, trim_heap
from charllm_trace.converters.tree import nest_parents
from charllm_trace.model import DEP_SCHEMA, ProcessGroup, Trace, TraceMeta

#: IO info of a node used for collective sizes: (shapes, types, values) lists.
IO = tuple[Any, Any, Any]

_ROOT_ARG = {"broadcast": 2, "reduce": 3, "gather": 3, "scatter": 3}
_PEER_ARG = {"send": 2, "recv": 2}


def _kineto_io(args: dict[str, Any] | None) -> IO:
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


def cpu_tree(ev: pl.DataFrame) -> pl.DataFrame:
    """Add ``parent`` to CPU rows by time nesting (GPU rows get null)."""
    cpu = ev.lazy().filter(~pl.col("on_gpu")).select("id", "pid", "tid", "start_ns", "dur_ns").collect()
    par = nest_parents(cpu)
    del cpu
    # scattered to the CPU rows' positions (a join on id would hash the whole table)
    pos = ev.select(pl.arg_where(~pl.col("on_gpu"))).to_series()
    return ev.with_columns(
        pl.repeat(None, ev.height, dtype=pl.Int64, eager=True).scatter(pos, par).alias("parent")
    )


def link_gpu(ev: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """Add ``launch_id`` (and a helper ``_rt_id``) to GPU rows by runtime correlation."""
    gpu_kinds = ["kernel", "memcpy", "memset"]
    # lazy: only the columns selected are gathered by the filters (eager filters copy every column)
    rt = (
        ev.lazy()
        .filter(
            (pl.col("kind") == "runtime") & pl.col("correlation").is_not_null() & (pl.col("correlation") != 0)
        )
        .select("correlation", pl.col("id").alias("_rt_id"), pl.col("parent").alias("_rt_parent"))
        .unique(subset="correlation", keep="first", maintain_order=True)
        .collect()
    )
    # Fallback: External id -> CPU op / annotation with that External id.
    ext = (
        ev.lazy()
        .filter(
            ~pl.col("on_gpu")
            & pl.col("external_id").is_not_null()
            & pl.col("kind").is_in(["cpu_op", "annotation"])
        )
        .sort("start_ns")
        .select("external_id", pl.col("id").alias("_ext_id"))
        .unique(subset="external_id", keep="first", maintain_order=True)
        .collect()
    )
    gpu = (
        ev.select("id", "kind", "correlation", "external_id", "on_gpu")
        .filter(pl.col("on_gpu"))
        .drop("on_gpu")
        .join(rt, on="correlation", how="left", maintain_order="left")
        .join(ext, on="external_id", how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("kind").is_in(gpu_kinds)).then(pl.col("_rt_id")).alias("_rt_id"),
        )
        .with_columns(
            pl.when(pl.col("kind").is_in(gpu_kinds))
            .then(pl.coalesce("_rt_parent", "_rt_id", "_ext_id"))
            .otherwise(pl.col("_ext_id"))
            .alias("launch_id"),
        )
    )
    # gpu holds the GPU rows in table order (the joins keep it and add no rows: rt and ext are
    # unique by key), so its columns scatter to those rows' positions (no join on id)
    pos = ev.select(pl.arg_where(pl.col("on_gpu"))).to_series()
    ev = ev.with_columns(
        pl.repeat(None, ev.height, dtype=pl.Int64, eager=True).scatter(pos, gpu[c]).alias(c)
        for c in ("_rt_id", "launch_id")
    )
    g = gpu.filter(pl.col("kind").is_in(gpu_kinds))
    stats = {
        "gpu_nodes": g.height,
        "gpu_linked_by_correlation": int(g["_rt_id"].is_not_null().sum()),
        "gpu_linked_by_external_id": int((g["_rt_id"].is_null() & g["launch_id"].is_not_null()).sum()),
        "gpu_unlinked": int(g["launch_id"].is_null().sum()),
    }
    return ev, stats


class _Tree:
    """Cheap ancestor walks over ids (ids are dense 0..n-1 row numbers here)."""

    def __init__(self, ids: np.ndarray, parents: np.ndarray, names: pl.Series) -> None:
        size = int(ids.max()) + 1 if len(ids) else 0
        self.parent = np.full(size, -1, dtype=np.int64)
        self.parent[ids] = parents
        self._names = names  # looked up on demand: only ancestors of communication nodes are visited
        self._cache: dict[int, str] = {}
        self._pos = np.full(size, -1, dtype=np.int64)
        self._pos[ids] = np.arange(len(ids))

    def name_of(self, i: int) -> str:
        nm = self._cache.get(i)
        if nm is None:
            nm = self._cache[i] = self._names[int(self._pos[i])]
        return nm

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
        ((kinds == "kernel") & _contains(name_s, r"(?i)nccl|rccl|msccl"))
        | (~pl.col("on_gpu") & name_s.str.starts_with("gloo:"))
    )

    def node_io(i: int) -> IO:
        if i in io:
            return io[i]
        return _kineto_io(comm_args.get(i))

    def find_context(start: int) -> dict[str, int]:
        """Nearest record_param_comms (with args), nccl:/gloo: annotation and c10d op among ancestors."""
        ctx: dict[str, int] = {}
        for a in [start, *tree.ancestors(start)]:
            nm = tree.name_of(a)
            if (
                nm == "record_param_comms"
                and "rpc" not in ctx
                and (C.has_collective_args(comm_args.get(a)) or a in io)
            ):
                ctx["rpc"] = a
            elif nm.startswith(("nccl:", "rccl:")) and "ann" not in ctx:
                ctx["ann"] = a
            elif nm.startswith("c10d::") and C.coll_type_of(nm) and "c10d" not in ctx:
                ctx["c10d"] = a
        return ctx

    # Async gloo ops run on worker threads: match them, in start order, to the c10d ops that
    # enqueued them (issue order), skipping c10d ops whose gloo op ran inline under them.
    gloo = cand.filter(pl.col("name").str.starts_with("gloo:")).sort("start_ns")
    gloo_c10d: dict[int, int] = {}
    if gloo.height:
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

    c10d_ids = set(gloo_c10d.values())
    c10d_start = (
        dict(ev.select("id", "start_ns").filter(pl.col("id").is_in(list(c10d_ids))).iter_rows())
        if c10d_ids
        else {}
    )
    rows: list[dict[str, Any]] = []
    unknown_type = 0
    for r in cand.iter_rows(named=True):
        i = r["id"]
        rec: dict[str, Any] = {"id": i}
        args = comm_args.get(i) or {}
        if r["kind"] == "kernel":
            start = r["_rt_id"] if r["_rt_id"] is not None else -1
            ctx = find_context(start) if start >= 0 else {}
        else:
            c = gloo_c10d.get(i)
            ctx = find_context(i)
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
        own_type = (C.coll_type_of(args.get("Collective name")) if args else None) or C.coll_type_of(
            r["name"]
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
            src = i if r["kind"] != "kernel" else ctx.get("ann")
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
        # Process group.
        pg_name = info.get("pg_name")
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
            _c10d=ctx.get("c10d") if r["kind"] != "kernel" else None,
            # issue order: a gloo op is ordered by the c10d op that enqueued it
            _start=c10d_start.get(ctx.get("c10d", -1), r["start_ns"])
            if r["kind"] != "kernel"
            else r["start_ns"],
        )
        rows.append(rec)
    report: dict[str, Any] = {"comm_nodes": len(rows), "comm_unknown_type": unknown_type}
    if not rows:
        return ev, report, pgs
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


def meta_from_profile(prof: KinetoProfile, ev: pl.DataFrame, pgs: dict[str, dict[str, Any]]) -> TraceMeta:
    dev_idx = None
    gpu_dev = ev["device"].filter(ev["kind"] == "kernel").drop_nulls()
    if gpu_dev.len():
        dev_idx = int(gpu_dev.mode().sort()[0])
    model = None
    if prof.device_properties:
        match = [d for d in prof.device_properties if C.as_int(d.get("id")) == dev_idx]
        names = {d.get("name") for d in prof.device_properties}
        # No entry with that id (a process that sees one GPU under another index, e.g. a ROCm VF):
        # the name is still certain when every listed device has the same one.
        pick = match[0] if match else (prof.device_properties[0] if len(names) == 1 else None)
        if pick is not None and isinstance(pick.get("name"), str):
            model = pick["name"]
    groups = tuple(
        ProcessGroup(name=k, desc=v.get("desc"), ranks=tuple(int(x) for x in v.get("ranks") or ()))
        for k, v in sorted(pgs.items())
    )
    return TraceMeta(
        rank=prof.rank,
        world_size=prof.world_size,
        device_model=model,
        device_index=dev_idx,
        hostname=prof.hostname,
        has_timestamps=True,
        clock="unix_ns",
        source="kineto",
        source_schema=f"kineto schemaVersion {prof.schema_version}"
        if prof.schema_version is not None
        else "kineto",
        process_groups=groups,
        extra={},
    )


def _deps(nodes: pl.DataFrame) -> pl.DataFrame:
    nodes = nodes.select("id", "parent", "launch_id")  # filters below gather only these
    ctrl_parent = nodes.filter(pl.col("parent").is_not_null()).select(
        pl.col("id").alias("node"), pl.col("parent").alias("dep"), pl.lit("ctrl").alias("kind")
    )
    # launch edges that are not already the parent edge (a gloo send runs inside its c10d op)
    ctrl_launch = nodes.filter(
        pl.col("launch_id").is_not_null()
        & (pl.col("launch_id") != pl.col("id"))
        & (pl.col("parent").is_null() | (pl.col("launch_id") != pl.col("parent")))
    ).select(pl.col("id").alias("node"), pl.col("launch_id").alias("dep"), pl.lit("ctrl").alias("kind"))
    return pl.concat([ctrl_parent, ctrl_launch]).cast(DEP_SCHEMA)  # type: ignore[arg-type]


def node_types(ev: pl.DataFrame) -> pl.DataFrame:
    return ev.with_columns(
        pl.when(pl.col("kind") == "gpu_annotation")
        .then(pl.lit("METADATA"))
        .when(pl.col("name") == "## process_group:init ##")
        .then(pl.lit("METADATA"))
        .otherwise(pl.lit("COMP"))
        .alias("node_type")
    )


def kineto_trace(prof: KinetoProfile) -> tuple[Trace, dict[str, Any]]:
    """Kineto-only conversion: CPU tree by time nesting, GPU nodes by correlation, collectives.

    Consumes ``prof.events`` (left empty) so that a big profile is not held twice."""
    ev = prof.events.rename({"row": "id"})
    prof.events = prof.events.clear()  # consumed: lets its buffers go as soon as ev's replace them
    ev = cpu_tree(ev)
    ev, gstats = link_gpu(ev)
    ev = node_types(ev)
    ev, creport, pgs = annotate_collectives(ev, prof.comm_args, prof)
    attrs = _attrs_column(ev, prof.comm_args)
    nodes = ev.drop("_rt_id", "cat").with_columns(attrs)
    meta = meta_from_profile(prof, ev, pgs)
    report: dict[str, Any] = {
        "source": "kineto",
        "kineto": prof.path,
        "kineto_events": prof.n_raw_events,
        "nodes": nodes.height,
        "link_method": "none (Kineto only)",
        **gstats,
        **creport,
    }
    meta.extra["convert"] = report
    trace = Trace(nodes=nodes, deps=_deps(nodes), meta=meta)
    trim_heap()  # the build's numpy temporaries are freed: give their pages back
    return trace, report


def _attrs_column(ev: pl.DataFrame, comm_args: dict[int, dict[str, Any]]) -> pl.Series:
    """``attrs``: the Kineto category, plus the verbatim comm args of communication-related nodes."""
    cats = ev["cat"]
    # one string per distinct category, gathered by row: the rows share its bytes (16 B a row)
    distinct = cats.drop_nulls().unique(maintain_order=True)
    per_cat = pl.select(pl.concat_str([pl.lit('{"cat":"'), pl.lit(distinct), pl.lit('"}')])).to_series()
    base = per_cat.gather(cats.cast(pl.Enum(distinct)).to_physical()).alias("attrs")
    if not comm_args:
        return base
    hit = ev.select(pl.int_range(0, pl.len(), dtype=pl.Int64).alias("pos"), "id", "cat").filter(
        pl.col("id").is_in(list(comm_args))
    )
    if hit.height == 0:
        return base
    values = [
        orjson.dumps({"cat": c, **comm_args[i]}).decode() for i, c in zip(hit["id"], hit["cat"], strict=True)
    ]
    return base.scatter(hit["pos"], pl.Series(values, dtype=pl.String))


#: Host-ET ops whose inputs feed the collective sizes (kept small: the io map is a dict).
_COMM_IO_PREFIXES = ("c10d::", "gloo:", "nccl:", "rccl:", "record_param_comms")


def _fill_times_from_descendants(nodes: pl.DataFrame, rounds: int = 16) -> pl.DataFrame:
    """Give timeless nodes (host-ET thread roots, ops outside the profile) the span of their timed
    descendants, bottom-up. Nodes with no timed descendant keep null times."""
    for _ in range(rounds):
        missing = nodes["start_ns"].is_null()
        if not missing.any():
            break
        span = (
            nodes.filter(pl.col("parent").is_not_null() & pl.col("start_ns").is_not_null())
            .group_by("parent")
            .agg(
                pl.col("start_ns").min().alias("_s"),
                (pl.col("start_ns") + pl.col("dur_ns")).max().alias("_e"),
            )
            .rename({"parent": "id"})
        )
        before = int(missing.sum())
        nodes = (
            nodes.join(span, on="id", how="left", maintain_order="left")
            .with_columns(
                pl.coalesce("start_ns", "_s").alias("start_ns"),
                pl.when(pl.col("start_ns").is_null())
                .then(pl.col("_e") - pl.col("_s"))
                .otherwise(pl.col("dur_ns"))
                .alias("dur_ns"),
            )
            .drop("_s", "_e")
        )
        if int(nodes["start_ns"].is_null().sum()) == before:
            break
    return nodes


def linked_trace(host: Any, prof: KinetoProfile) -> tuple[Trace, dict[str, Any]]:
    """Host ET + Kineto profile of the same rank: host ops with Kineto times, plus every Kineto-only
    node (runtime calls, kernels, memcpys, Python functions), collectives and data dependencies."""
    from charllm_trace.converters.host_et import data_deps, pg_groups
    from charllm_trace.converters.link import link

    ev = prof.events.rename({"row": "id"})
    ev = cpu_tree(ev)
    lk = link(host, ev, prof.path)
    if lk.method == "none":
        trace, report = kineto_trace(prof)
        report.update(host_et=host.path, link_method="none", link=lk.stats)
        report["link_method"] = f"none (Kineto only: {lk.stats.get('fallback_reason')})"
        trace.meta.extra["convert"] = report
        trace.meta.extra["link_method"] = "none"
        if not trace.meta.process_groups:
            trace.meta.process_groups = pg_groups(host.process_groups)
        return trace, report
    ev, gstats = link_gpu(ev)
    ev = node_types(ev)
    pairs = lk.pairs
    comm_like = host.nodes.filter(
        pl.col("name").str.starts_with(_COMM_IO_PREFIXES[0])
        | pl.col("name").str.starts_with("gloo:")
        | pl.col("name").str.starts_with("nccl:")
        | pl.col("name").str.starts_with("rccl:")
        | (pl.col("name") == "record_param_comms")
    )
    comm_pairs = pairs.join(comm_like.select(pl.col("id").alias("host_id")), on="host_id")
    io = {kid: host.io[hid] for kid, hid in comm_pairs.iter_rows() if hid in host.io}
    ev, creport, pgs = annotate_collectives(ev, prof.comm_args, prof, io=io, extra_pgs=host.process_groups)
    ev = ev.with_columns(_attrs_column(ev, prof.comm_args)).drop("_rt_id", "cat")
    hn = host.nodes
    offset = int(hn["id"].max()) + 1 if hn.height else 0
    idmap = (
        ev.select("id")
        .join(pairs, on="id", how="left")
        .select("id", pl.coalesce("host_id", pl.col("id") + offset).alias("new"))
    )

    def remap(df: pl.DataFrame, col: str) -> pl.DataFrame:
        m = idmap.rename({"id": col, "new": "_new"})
        return (
            df.join(m, on=col, how="left", maintain_order="left")
            .with_columns(pl.col("_new").alias(col))
            .drop("_new")
        )

    linked = pairs["id"]
    ev = ev.with_columns(pl.col("id").is_in(linked.implode()).alias("_linked"))
    for col in ("parent", "launch_id"):
        ev = remap(ev, col)
    ev = remap(ev, "id")
    hsel = hn.select(
        pl.col("id"),
        pl.col("parent").alias("_hparent"),
        pl.col("rf_id").alias("_hrf"),
        pl.col("inputs").alias("_hin"),
        pl.col("outputs").alias("_hout"),
        pl.col("attrs").alias("_hattrs"),
    )
    # The host ET's parent is trusted only on the child's own thread: PyTorch's execution trace
    # makes an op a child of whatever op was open when it started, even one on another thread
    # (e.g. DDP's async gloo:all_reduce on a gloo worker). Across threads the Kineto nesting
    # parent (same thread, by time) stands. Host-only parents (thread roots) have no Kineto tid.
    # On its own thread, too, the host parent must be open when the child starts: the execution
    # trace can keep an op "open" after it ended (seen for a gloo worker's async all_reduce, which
    # then parented the worker's next collectives); such a parent is not trusted either.
    parent_tid = ev.select(
        pl.col("id").alias("_hparent"),
        pl.col("tid").alias("_ptid"),
        pl.col("start_ns").alias("_pstart"),
        (pl.col("start_ns") + pl.col("dur_ns")).alias("_pend"),
    )
    ev = (
        ev.join(hsel, on="id", how="left", maintain_order="left")
        .join(parent_tid, on="_hparent", how="left", maintain_order="left")
        .with_columns(
            pl.when(
                pl.col("_linked")
                & (pl.col("_ptid").is_null() | pl.col("tid").is_null() | (pl.col("_ptid") == pl.col("tid")))
                & (
                    pl.col("_pstart").is_null()
                    | pl.col("_pend").is_null()
                    | pl.col("start_ns").is_null()
                    | pl.col("start_ns").is_between(pl.col("_pstart"), pl.col("_pend"))
                )
            )
            .then(pl.col("_hparent"))
            .otherwise(pl.col("parent"))
            .alias("parent"),
            pl.coalesce("rf_id", "_hrf").alias("rf_id"),
            pl.col("_hin").alias("inputs"),
            pl.col("_hout").alias("outputs"),
            pl.when(pl.col("_hattrs").is_not_null() & (pl.col("_hattrs") != "{}"))
            .then(
                pl.concat_str(
                    [
                        pl.col("attrs").str.slice(0, pl.col("attrs").str.len_chars() - 1),
                        pl.lit(","),
                        pl.col("_hattrs").str.slice(1),
                    ]
                )
            )
            .otherwise(pl.col("attrs"))
            .alias("attrs"),
        )
        .drop("_hparent", "_ptid", "_pstart", "_pend", "_hrf", "_hin", "_hout", "_hattrs", "_linked")
    )
    # Host nodes with no Kineto op (thread roots, process-group init, ops outside the profile).
    # The host ET numbers threads its own way; put them on Kineto's numbering (the thread most of
    # the thread's linked ops ran on), keeping the host number only where no op was linked.
    ktid = (
        ev.select("id", "tid")
        .join(hn.select("id", "et_tid"), on="id")
        .group_by("et_tid")
        .agg(pl.col("tid").mode().min().alias("_ktid"))
    )
    rest = (
        hn.filter(~pl.col("id").is_in(pairs["host_id"].implode()))
        .join(ktid, on="et_tid", how="left", maintain_order="left")
        .with_columns(pl.coalesce("_ktid", "et_tid").alias("et_tid"))
    ).select(
        "id",
        "name",
        "parent",
        "rf_id",
        "kind",
        "inputs",
        "outputs",
        "attrs",
        pl.col("et_tid").alias("tid"),
        pl.lit(False).alias("on_gpu"),
        pl.when(pl.col("name") == "## process_group:init ##")
        .then(pl.lit("METADATA"))
        .otherwise(pl.lit("COMP"))
        .alias("node_type"),
    )
    nodes = pl.concat([ev, rest], how="diagonal_relaxed")
    nodes = _fill_times_from_descendants(nodes)
    deps = pl.concat([_deps(nodes), data_deps(host)]).unique(maintain_order=True)
    meta = meta_from_profile(prof, ev, pgs)
    meta.source = "host_et+kineto"
    meta.source_schema = f"pytorch host ET {host.schema}; " + (meta.source_schema or "kineto")
    host_rest = rest.filter(
        ~pl.col("name").str.starts_with("[pytorch|profiler|execution_")
        & (pl.col("name") != "## process_group:init ##")
    )
    report: dict[str, Any] = {
        "source": "host_et+kineto",
        "host_et": host.path,
        "kineto": prof.path,
        "kineto_events": prof.n_raw_events,
        "nodes": nodes.height,
        "link_method": lk.method,
        "host_ops": lk.stats.get("host_ops"),
        "host_ops_linked": pairs.height,
        "host_ops_unlinked": host_rest.height,
        "kineto_ops_unlinked": lk.stats.get("kineto_ops", 0) - pairs.height,
        "link": lk.stats,
        **gstats,
        **creport,
        "data_deps": int((deps["kind"] == "data").sum()),
        "nodes_without_time": int(nodes["start_ns"].is_null().sum()),
    }
    meta.extra["convert"] = report
    meta.extra["link_method"] = lk.method
    return Trace(nodes=nodes, deps=deps, meta=meta), report
