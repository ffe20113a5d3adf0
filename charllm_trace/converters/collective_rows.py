"""The collective columns of one communication node (the per-node part of
``annotate.annotate_collectives``): the ops around it, its type, message size, process group,
all-to-all splits and root/peer. Rules: docs/converters.md, "Collectives"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from charllm_trace.converters import collectives as C
from charllm_trace.core.model import ATTR_TENSOR_GROUP

#: IO info of a node used for collective sizes: (shapes, types, values) lists.
IO = tuple[Any, Any, Any]

_ROOT_ARG = {"broadcast": 2, "reduce": 3, "gather": 3, "scatter": 3}
_PEER_ARG = {"send": 2, "recv": 2}
_GATHERS = ("all_gather", "gather")


def kineto_io(args: dict[str, Any] | None) -> IO:
    if not args:
        return None, None, None
    return args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs")


@dataclass
class RowInputs:
    """What every node's row reads: the call tree (``annotate._Tree``), the comm args and IO by
    node id, the process groups (updated as rows name new ones), the c10d op that launched each
    gloo op, the lone device ops and the start of each launching c10d op."""

    tree: Any
    comm_args: dict[int, dict[str, Any]]
    io: dict[int, IO]
    pgs: dict[str, dict[str, Any]]
    gloo_c10d: dict[int, int]
    lone_ids: set[int]
    c10d_start: dict[int, int]
    #: start id -> the name of the innermost ``charllm_pg:`` range around it (``_Tree.nearest_marks``
    #: of every start ``_marked_group`` may look at), for the starts inside one
    marks: dict[int, str]

    def node_io(self, i: int) -> IO:
        if i in self.io:
            return self.io[i]
        return kineto_io(self.comm_args.get(i))


def _marked_group(marks: dict[int, str], starts: list[int]) -> str | None:
    """The group named by the innermost ``charllm_pg:<name>`` range around the first of ``starts``
    inside one (``collectors/pg_hook.py`` wraps each collective call in one); ``marks``: start ->
    that range's name."""
    for s in starts:
        name = marks.get(s)
        if name is not None:
            return name[len(C.PG_MARK) :] or None
    return None


def mark_starts(found: list[int], on_host: bool, i: int, gloo_c10d: dict[int, int]) -> tuple[int, int, int]:
    """The starts ``_marked_group`` reads for node ``i`` whose context walk ``found`` (rpc, ann,
    c10d): its c10d op (a gloo op's: the one that launched it, when the walk found none), its
    annotation, itself (-1: none)."""
    c10d = found[2] if found[2] >= 0 else (gloo_c10d.get(i, -1) if on_host else -1)
    return c10d, found[1], i


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


def _context(d: RowInputs, i: int, found: tuple[int, int, int], on_host: bool) -> dict[str, int]:
    """The node's context ops by role (rpc, ann, c10d); a gloo op's also from the c10d op that
    launched it and the record_param_comms with collective args around that op."""
    ctx = {k: v for k, v in zip(("rpc", "ann", "c10d"), found, strict=True) if v >= 0}
    c = d.gloo_c10d.get(i) if on_host else None
    if c is not None:
        ctx.setdefault("c10d", c)
        for a in [c, *d.tree.ancestors(c)]:
            if d.tree.name_of(a) == "record_param_comms" and C.has_collective_args(d.comm_args.get(a)):
                ctx.setdefault("rpc", a)
                break
    return ctx


def _types(
    d: RowInputs, r: dict[str, Any], args: dict[str, Any], ctx: dict[str, int]
) -> tuple[str | None, str | None, str | None]:
    """(own type, c10d op's type, type). The node's own type: its own comm args, else its own name
    (gloo:all_reduce, a kernel named ..._AllReduce_...). The enclosing ops' type (record_param_comms
    args, c10d:: op, nccl: annotation) only types a node whose own name names no collective (a
    SendRecv kernel): a reduce_scatter that gloo runs as a gloo:all_reduce is an all_reduce here."""
    i = r["id"]
    own_type = (C.coll_type_of(args.get("Collective name")) if args else None) or (
        None if i in d.lone_ids else C.coll_type_of(r["name"])
    )
    c10d_type = C.coll_type_of(d.tree.name_of(ctx["c10d"])) if "c10d" in ctx else None
    ctype = (
        own_type
        or (C.coll_type_of(d.comm_args.get(ctx["rpc"], {}).get("Collective name")) if "rpc" in ctx else None)
        or c10d_type
        or (C.coll_type_of(d.tree.name_of(ctx["ann"])) if "ann" in ctx else None)
    )
    return own_type, c10d_type, ctype


def _c10d_input(d: RowInputs, c10d: int, c10d_type: str | None) -> tuple[Any, Any]:
    """Elements and type of the c10d op's input: c10d::alltoall_base_ / _reduce_scatter_base_
    (output, input, ...) skip the output."""
    shapes, types, _ = d.node_io(c10d)
    skip_out = c10d_type in ("all_to_all", "reduce_scatter")
    return C.first_tensor(
        shapes[1:] if skip_out and isinstance(shapes, list) else shapes,
        types[1:] if skip_out and isinstance(types, list) else types,
    )


def _sizes_from_inputs(
    d: RowInputs, i: int, ctx: dict[str, int], ctype: str | None, c10d_type: str | None, on_host: bool
) -> dict[str, Any]:
    """Sizes from the op's own inputs: the gloo op, or the nccl:/rccl: annotation; an all_gather's
    or gather's output from its c10d op; else the c10d op's input."""
    info: dict[str, Any] = {"coll_type": ctype}
    src = i if on_host else ctx.get("ann")
    n_in, ty = (None, None)
    if src is not None:
        shapes, types, _ = d.node_io(src)
        n_in, ty = C.first_tensor(shapes, types)
    c10d_out = None
    if "c10d" in ctx and ctype in _GATHERS:
        shapes, types, _ = d.node_io(ctx["c10d"])
        # the output (first argument) only: the input would give the per-rank size
        c10d_out, ty2 = C.first_tensor(
            shapes[:1] if isinstance(shapes, list) else None,
            types[:1] if isinstance(types, list) else None,
        )
        ty = ty or ty2
    if n_in is None and "c10d" in ctx and ctype not in _GATHERS:
        n_in, ty = _c10d_input(d, ctx["c10d"], c10d_type)
    dt, size = C.dtype_info(ty)
    info["dtype"] = dt
    info["in_nelems"] = n_in
    info["_c10d_out"] = c10d_out
    info["size_source"] = "inputs" if (n_in is not None or c10d_out is not None) else None
    info["_elem_size"] = size
    return info


def _size_info(
    d: RowInputs,
    r: dict[str, Any],
    args: dict[str, Any],
    ctx: dict[str, int],
    types: tuple[str | None, str | None, str | None],
) -> dict[str, Any]:
    """Type, sizes, group and sequence from the node's own comm args, else from the enclosing
    record_param_comms' args, else from the inputs."""
    own_type, c10d_type, ctype = types
    if C.has_collective_args(args):
        info = C.from_args(args, ctype)
        info["size_source"] = "kernel_args"
        return info
    if "rpc" in ctx and C.has_collective_args(d.comm_args.get(ctx["rpc"])):
        info = C.from_args(d.comm_args[ctx["rpc"]], ctype, own_type=own_type)
        info["size_source"] = "record_param_comms_args"
        return info
    return _sizes_from_inputs(d, r["id"], ctx, ctype, c10d_type, not r["on_gpu"])


def _group(
    d: RowInputs, info: dict[str, Any], ctx: dict[str, int], i: int
) -> tuple[str | None, list[int], int | None]:
    """(group name, its ranks, its size). The group is the op's own, else the collector's range
    around the call (gloo records none), else the only group; a group seen first here is added
    to the table."""
    pgs = d.pgs
    pg_name = info.get("pg_name") or _marked_group(d.marks, [ctx.get("c10d", -1), ctx.get("ann", -1), i])
    if pg_name is not None and pg_name not in pgs:
        pgs[pg_name] = {"desc": info.get("pg_desc"), "ranks": info.get("pg_ranks") or []}
    elif pg_name is not None:
        pgs[pg_name]["desc"] = pgs[pg_name]["desc"] or info.get("pg_desc")
        pgs[pg_name]["ranks"] = pgs[pg_name]["ranks"] or info.get("pg_ranks") or []
    if pg_name is None and len(pgs) == 1:
        pg_name = next(iter(pgs))
    ranks = pgs[pg_name]["ranks"] if pg_name in pgs else (info.get("pg_ranks") or [])
    gsize = (
        info.get("group_size")
        or (len(ranks) if ranks else None)
        or (pgs.get(pg_name, {}).get("size") if pg_name else None)
    )
    return pg_name, ranks, gsize


def _fill_counts(info: dict[str, Any], ctype: str | None, gsize: int | None) -> None:
    """Elements and bytes of a collective sized from its inputs (a gather's from the group size)."""
    if info.get("size_source") not in ("inputs", None) or "num_elems" in info:
        return
    n_in = info.get("in_nelems")
    if ctype in _GATHERS:
        n = info.get("_c10d_out") or (n_in * gsize if (n_in is not None and gsize) else None)
    else:
        n = C.comm_nelems(ctype, n_in, n_in)
    info["num_elems"] = n
    size = info.get("_elem_size")
    info["comm_bytes"] = (
        0 if ctype == "barrier" else (n * size if (n is not None and size is not None) else None)
    )


def _a2a_splits(
    d: RowInputs, info: dict[str, Any], ctype: str | None, c10d_type: str | None, ctx: dict[str, int]
) -> None:
    """All-to-all split sizes from c10d::alltoall_base_(output, input, pg, output_split_sizes,
    input_split_sizes, ...) when the comm args did not give them."""
    if ctype != "all_to_all" or c10d_type != "all_to_all" or info.get("in_split") or info.get("out_split"):
        return
    _, _, values = d.node_io(ctx["c10d"])
    if isinstance(values, list) and len(values) > 4:
        info["out_split"] = C.parse_list(values[3]) or None
        info["in_split"] = C.parse_list(values[4]) or None


def _root_peer(
    d: RowInputs, ctype: str | None, c10d_type: str | None, ctx: dict[str, int], ranks: list[int]
) -> tuple[int | None, int | None]:
    """Root / peer from the c10d op's scalar inputs (group ranks -> global ranks), where the c10d
    op is the same operation (its signature gives the argument's position)."""
    idx = _ROOT_ARG.get(ctype, _PEER_ARG.get(ctype)) if ctype is not None else None
    if c10d_type != ctype or idx is None:
        return None, None
    _, _, values = d.node_io(ctx["c10d"])
    g = C.as_int(values[idx]) if isinstance(values, list) and idx < len(values) else None
    if g is None:
        return None, None
    glob = ranks[g] if ranks and 0 <= g < len(ranks) else g
    return (glob, None) if ctype in _ROOT_ARG else (None, glob)


def collective_row(d: RowInputs, r: dict[str, Any], found: tuple[int, int, int]) -> dict[str, Any]:
    """The row of collective columns of candidate ``r`` (a row of id, name, on_gpu, start_ns)
    whose nearest record_param_comms, annotation and c10d op are ``found`` (-1: none). The group
    size its own tensors imply goes into its comm args (its ``attrs``)."""
    i = r["id"]
    args = d.comm_args.get(i) or {}
    on_host = not r["on_gpu"]
    ctx = _context(d, i, found, on_host)
    types = _types(d, r, args, ctx)
    c10d_type = types[1]
    info = _size_info(d, r, args, ctx, types)
    pg_name, ranks, gsize = _group(d, info, ctx, i)
    ctype = info.get("coll_type")
    _fill_counts(info, ctype, gsize)
    _a2a_splits(d, info, ctype, c10d_type, ctx)
    root, peer = _root_peer(d, ctype, c10d_type, ctx, ranks)
    tg = _tensor_group(info, ctype, c10d_type, d.node_io(ctx["c10d"]) if "c10d" in ctx else None)
    if tg is not None:  # the group size the op's own tensors imply, kept in its attrs
        d.comm_args.setdefault(i, {})[ATTR_TENSOR_GROUP] = tg
    return {
        "id": i,
        "pg_name": pg_name,
        "node_type": C.node_type_of(ctype),
        "coll_type": ctype,
        "comm_bytes": info.get("comm_bytes"),
        "dtype": None if ctype == "barrier" else info.get("dtype"),
        "num_elems": info.get("num_elems"),
        "coll_seq": info.get("coll_seq"),
        "root": root,
        "peer": peer,
        "in_split": info.get("in_split"),
        "out_split": info.get("out_split"),
        "_size_source": info.get("size_source"),
        "_c10d": ctx.get("c10d") if on_host else None,
        # issue order: a gloo op is ordered by the c10d op that enqueued it
        "_start": d.c10d_start.get(ctx.get("c10d", -1), r["start_ns"]) if on_host else r["start_ns"],
    }
