"""The one place where nodes are classified (NVIDIA, AMD and CPU/gloo traces).

Every analysis asks this module what a node is; no other module looks at names.

Activity class (column ``cls``):

============== ==============================================================
``comm``       a GPU collective / point-to-point kernel: NCCL and RCCL kernels
               (RCCL names its kernels ``nccl…`` too), MSCCL(++) and HCCL
               (``hccl…``) kernels, or any GPU kernel, memcpy or memset the converter gave a
               ``coll_type`` (a collective's only device work: converters/lone_collectives.py)
``compute``    any other GPU kernel
``memcpy``     GPU memory copies (Kineto ``gpu_memcpy``; AMD ``__amd_rocclr_copy…``
               blit kernels; names ``Memcpy…`` / ``dma…``)
``memset``     GPU memory sets (``gpu_memset``; ``__amd_rocclr_fill…``; ``Memset…``)
``sync``       GPU-side synchronisation records (kind ``sync``: Kineto ``cuda_sync``,
               "Stream Wait Event" included; other GPU records named ``… Sync``)
``gpu_range``  ranges on GPU streams (``gpu_user_annotation``): not activity
``cpu_comm``   a CPU operator that performs or wraps a collective (it has a
               ``coll_type``, or is named ``gloo:…``, ``nccl:…``, ``hccl:…``, ``c10d::…``,
               ``record_param_comms``), and every CPU op nested inside one
``cpu_compute`` a CPU operator with no children (a leaf), not ``cpu_comm``
``cpu``        any other CPU node (annotations, runtime calls, inner CPU ops)
============== ==============================================================

``hip…``/``cuda…`` memcpy runtime calls are CPU runtime nodes (``cpu``), never
communication.

Phase (column ``phase``) for GPU nodes, from the CPU op that launched them and
that op's ancestors: ``communication`` for ``comm``; ``optimizer`` when an
ancestor is ``Optimizer.step``/``Optimizer.zero_grad``/``optimizer…``;
``backward`` when an ancestor is a backward op (``…Backward…``,
``autograd::engine…``, the root of every op the autograd thread runs);
``forward`` otherwise; ``unknown`` when the launcher is not in the trace.
"""

from __future__ import annotations

import numpy as np
import polars as pl

CLASSES = ("compute", "comm", "memcpy", "memset", "sync", "gpu_range", "cpu_comm", "cpu_compute", "cpu")
PHASES = ("forward", "backward", "optimizer", "communication", "unknown")

# Patterns (polars regex, applied to node names).
COMM_KERNEL_RE = r"^(nccl|rccl|msccl|hccl|ncclDevKernel|ncclKernel)|^void (nccl|rccl)"
MEMCPY_NAME_RE = r"^(Memcpy|memcpy|dma)|__amd_rocclr_copy"
MEMSET_NAME_RE = r"^(Memset|memset)|__amd_rocclr_fill"
SYNC_NAME_RE = r"(?i)\bsync\b|Sync$"
CPU_COMM_NAME_RE = r"^(gloo:|nccl:|rccl:|hccl:|c10d::|record_param_comms$|ProcessGroupGloo|ProcessGroupNCCL)"
OPTIMIZER_RE = r"^Optimizer\.(step|zero_grad)|^[Oo]ptimizer|^##\s*optimizer"
BACKWARD_RE = r"Backward|backward|^autograd::engine"


def _name_flags(nodes: pl.DataFrame) -> pl.DataFrame:
    """Name-pattern flags of every row, evaluated once per distinct name (traces repeat a
    few thousand names millions of times) and gathered back by each row's name code."""
    nm = nodes["name"].fill_null("")
    u = nm.unique(maintain_order=True)
    n = pl.col("_nm")
    flags = pl.DataFrame({"_nm": u}).select(
        _f_comm=n.str.contains(COMM_KERNEL_RE),
        _f_memcpy=n.str.contains(MEMCPY_NAME_RE),
        _f_memset=n.str.contains(MEMSET_NAME_RE),
        _f_sync=n.str.contains(SYNC_NAME_RE),
        _f_cpucomm=n.str.contains(CPU_COMM_NAME_RE),
    )
    codes = nm.cast(pl.Enum(u)).to_physical()  # a join on the names would copy them per row
    return flags.select(pl.all().gather(codes))


def classify(nodes: pl.DataFrame) -> pl.DataFrame:
    """Return ``nodes`` with a ``cls`` column (see the module docstring)."""
    kind = pl.col("kind").fill_null("other")
    gpu = pl.col("on_gpu").fill_null(False)
    has_coll = pl.col("coll_type").is_not_null()
    work = pl.concat([nodes.select("kind", "on_gpu", "coll_type"), _name_flags(nodes)], how="horizontal")
    cpu_comm_self = (~gpu) & (has_coll | pl.col("_f_cpucomm")) & (kind != "runtime")
    gpu_cls = (
        pl.when(kind == "gpu_annotation")
        .then(pl.lit("gpu_range"))
        .when(kind == "sync")
        .then(pl.lit("sync"))
        # a copy the converter found to be a collective's only device work (one-rank NCCL)
        .when(kind.is_in(["memcpy", "memset"]) & has_coll)
        .then(pl.lit("comm"))
        .when((kind == "memcpy") | pl.col("_f_memcpy"))
        .then(pl.lit("memcpy"))
        .when((kind == "memset") | pl.col("_f_memset"))
        .then(pl.lit("memset"))
        .when((kind == "kernel") & (has_coll | pl.col("_f_comm")))
        .then(pl.lit("comm"))
        .when(kind == "kernel")
        .then(pl.lit("compute"))
        .when(pl.col("_f_sync"))
        .then(pl.lit("sync"))
        .otherwise(pl.lit("gpu_range"))
    )
    cpu_cls = (
        pl.when(kind == "cpu_op").then(pl.lit("cpu_compute")).otherwise(pl.lit("cpu"))
    )  # leaf-ness and nesting in collectives are applied below
    base = work.select(
        pl.when(gpu).then(gpu_cls).otherwise(cpu_cls).alias("cls"),
        cpu_comm_self.alias("_self"),
        (~gpu & (kind == "cpu_op")).alias("_cpu_op"),
    )
    # CPU ops nested in a CPU collective are communication too; leaves are compute.
    ids = nodes["id"].to_numpy()
    parents = nodes["parent"].to_numpy()
    ppos = positions(ids, parents)  # row of each row's parent (-1: none)
    self_flag = base["_self"].to_numpy()
    on_cpu = ~nodes["on_gpu"].fill_null(False).to_numpy()
    in_comm = ancestor_any(ids, parents, self_flag, ppos=ppos) & on_cpu if self_flag.any() else self_flag
    has_child = np.zeros(len(ids), dtype=bool)
    has_child[ppos[ppos >= 0]] = True  # ids are unique within a trace
    inner_op = base["_cpu_op"].to_numpy() & has_child  # a cpu_op with children: not a leaf
    cls = base["cls"]
    if in_comm.any() or inner_op.any():
        cls = (
            base.select(
                pl.when(pl.Series(in_comm))
                .then(pl.lit("cpu_comm"))
                .when(pl.Series(inner_op))
                .then(pl.lit("cpu"))
                .otherwise(pl.col("cls"))
            )
            .to_series()
            .alias("cls")
        )
    return nodes.with_columns(cls)


def positions(ids: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """Row position of each ref in ``ids`` (-1 when missing or null)."""
    ids = np.asarray(ids)
    n = len(ids)
    if n and ids.dtype.kind in "iu" and ids[0] == 0 and ids[-1] == n - 1 and (np.diff(ids) == 1).all():
        # ids are the row numbers (a converted Kineto profile): a ref is its own position
        refs_f = np.asarray(refs, dtype=float)
        r = np.where(np.isnan(refs_f), -1, refs_f).astype(np.int64)
        return np.where((r >= 0) & (r < n), r, -1)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    refs_f = np.asarray(refs, dtype=float)
    valid = ~np.isnan(refs_f)
    r = np.where(valid, refs_f, 0).astype(np.int64)
    k = np.searchsorted(sorted_ids, r)
    k = np.minimum(k, max(len(ids) - 1, 0))
    found = valid & (len(ids) > 0)
    if len(ids):
        found &= sorted_ids[k] == r
    return np.where(found, order[k] if len(ids) else -1, -1)


def ancestor_any(
    ids: np.ndarray, parents: np.ndarray, flag: np.ndarray, ppos: np.ndarray | None = None
) -> np.ndarray:
    """For each row, whether it or any ancestor (via ``parent``) has ``flag``.

    Pointer doubling: log2(depth) vector steps, no per-node loop. Cycles are safe.
    ``ppos`` may pass ``positions(ids, parents)`` when the caller has it.
    """
    flag = np.asarray(flag, dtype=bool).copy()
    if flag.size == 0:
        return flag
    p = positions(ids, parents) if ppos is None else ppos
    for _ in range(64):
        valid = p >= 0
        if not valid.any():
            break
        flag[valid] |= flag[p[valid]]
        nxt = np.full_like(p, -1)
        nxt[valid] = p[p[valid]]
        if np.array_equal(nxt, p):
            break
        p = nxt
    return flag


#: Levels of the call tree ``launching_ops`` walks up at most (real call trees are far shallower).
MAX_DEPTH = 4096


def launcher_positions(df: pl.DataFrame) -> np.ndarray:
    """Row position of the CPU node that launched each row (-1 if none): the ``launch_id``
    node, else the first CPU node (in row order) with the same correlation id (the runtime launch
    call). A sort of the CPU rows' correlation ids and a binary search, no join."""
    lp = positions(df["id"].to_numpy(), df["launch_id"].to_numpy())
    corr_s = df["correlation"]
    if corr_s.null_count() == corr_s.len():
        return lp
    gpu = df["on_gpu"].fill_null(False).to_numpy()
    has = corr_s.is_not_null().to_numpy()
    corr = corr_s.fill_null(0).to_numpy().astype(np.int64, copy=False)
    cpu_rows = np.flatnonzero(has & ~gpu)
    keys = corr[cpu_rows]
    order = np.argsort(keys, kind="stable")  # equal ids keep row order: the first row comes first
    keys, cpu_rows = keys[order], cpu_rows[order]
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    keys, cpu_rows = keys[first], cpu_rows[first]
    gpu_rows = np.flatnonzero(has & gpu)
    cp = np.full(len(lp), -1, dtype=np.int64)
    if keys.size and gpu_rows.size:
        k = np.minimum(np.searchsorted(keys, corr[gpu_rows]), keys.size - 1)
        found = keys[k] == corr[gpu_rows]
        cp[gpu_rows[found]] = cpu_rows[k[found]]
    return np.where(lp >= 0, lp, cp)


def launch_calls(
    ids: np.ndarray, on_gpu: np.ndarray, runtime: np.ndarray, correlation: np.ndarray, launch_id: np.ndarray
) -> np.ndarray:
    """For each GPU row, the row position of the call that launched it (-1 for other rows and where
    the trace lacks it): the first CPU runtime call (``runtime``: kind ``runtime``), in row order,
    with the row's correlation id (> 0), else the CPU row its ``launch_id`` names. The point graph's
    ``launch`` edges (graph/points.py) and the Perfetto export's launch arrows
    (exports/perfetto_layout.py) start there (docs/model.md). One value per row in each array;
    ``correlation`` and ``launch_id`` hold -1 for none. A sort and binary searches, no join."""
    n = len(ids)
    gpu = np.asarray(on_gpu, dtype=bool)
    corr = np.asarray(correlation, dtype=np.int64)
    out = np.full(n, -1, dtype=np.int64)
    rt_rows = np.flatnonzero(np.asarray(runtime, dtype=bool) & ~gpu & (corr > 0))
    gk = np.flatnonzero(gpu)
    if len(rt_rows) and len(gk):
        u, first = np.unique(corr[rt_rows], return_index=True)  # the first call of each id
        k = np.minimum(np.searchsorted(u, corr[gk]), len(u) - 1)
        hit = (u[k] == corr[gk]) & (corr[gk] > 0)
        out[gk[hit]] = rt_rows[first[k[hit]]]
    lid = np.asarray(launch_id, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    miss = np.flatnonzero(gpu & (out < 0) & (lid >= 0))
    if len(miss) and n:
        order = np.argsort(ids, kind="stable")
        s = ids[order]
        k = np.minimum(np.searchsorted(s, lid[miss]), n - 1)
        found = s[k] == lid[miss]
        out[miss[found]] = order[k[found]]
    out[(out >= 0) & gpu[np.maximum(out, 0)]] = -1  # a GPU row launches nothing
    return out


def launching_ops(
    df: pl.DataFrame, deps: pl.DataFrame | None = None, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """For each row (or each of ``rows``, positions in ``df``), the row position of the CPU op that
    launched it and of the top-level op above that (-1 where no launcher is in the trace).

    The launching op is :func:`launcher_positions`' node, or, when that is a runtime call
    (``cudaLaunchKernel``), the node enclosing the call (the call itself when nothing encloses it).
    The top-level op is the outermost ``cpu_op`` among the launching op and its ancestors (e.g.
    ``aten::conv2d`` above ``aten::cudnn_convolution``; annotations such as ``ProfilerStep#N`` are
    not ops), the launching op itself when none is. The walk up the call tree is vectorised over
    the launched rows, one step per level, ``MAX_DEPTH`` levels at most.

    ``deps`` (the trace's ``Trace.deps``): a GPU row without a launcher there takes the first CPU
    node it has a ``ctrl`` dependency on (Chakra's converter records a GPU node's launching op so)."""
    ids = df["id"].to_numpy()
    rows = np.arange(len(ids)) if rows is None else np.asarray(rows, dtype=np.int64)
    on_gpu = df["on_gpu"].fill_null(False).to_numpy()
    pos = launcher_positions(df)[rows]
    if deps is not None and deps.height and (on_gpu[rows] & (pos < 0)).any():
        ctrl = deps.filter(pl.col("kind") == "ctrl")
        node, dep = positions(ids, ctrl["node"].to_numpy()), positions(ids, ctrl["dep"].to_numpy())
        ok = (node >= 0) & (dep >= 0)
        node, dep = node[ok], dep[ok]
        ok = on_gpu[node] & ~on_gpu[dep]
        by_dep = np.full(len(ids), -1, dtype=np.int64)
        by_dep[node[ok][::-1]] = dep[ok][::-1]  # the first dependency listed wins
        pos = np.where(on_gpu[rows] & (pos < 0), by_dep[rows], pos)
    ppos = positions(ids, df["parent"].to_numpy())
    is_rt = (df["kind"] == "runtime").fill_null(False).to_numpy()
    # Python stack frames (Kineto ``python_function`` events, recorded with ``with_stack``) are not
    # operators: the top-level op is the outermost real op (and the same once sanitize strips paths)
    py = df["attrs"].str.contains('"cat":"python_function', literal=True).fill_null(False).to_numpy()
    is_op = (df["kind"] == "cpu_op").fill_null(False).to_numpy() & ~py
    op = pos.copy()
    rt = (pos >= 0) & is_rt[np.maximum(pos, 0)]
    up = ppos[np.maximum(pos, 0)]
    op[rt & (up >= 0)] = up[rt & (up >= 0)]
    for _ in range(MAX_DEPTH):  # a Python frame is not the launching op: its nearest real op above is
        frame = (op >= 0) & py[np.maximum(op, 0)]
        if not frame.any():
            break
        op[frame] = ppos[op[frame]]
    top = np.where((op >= 0) & is_op[np.maximum(op, 0)], op, -1)
    walk = np.flatnonzero(op >= 0)  # the rows still walking up, and where they are
    cur = ppos[op[walk]]
    for _ in range(MAX_DEPTH):  # one step per level (parent cycles end at the limit)
        live = cur >= 0
        walk, cur = walk[live], cur[live]
        if walk.size == 0:
            break
        hit = is_op[cur]
        top[walk[hit]] = cur[hit]
        cur = ppos[cur]
    top = np.where((op >= 0) & (top < 0), op, top)
    return op, top


def with_phase(nodes: pl.DataFrame) -> pl.DataFrame:
    """``classify`` plus a ``phase`` column for GPU nodes (null on CPU). ``nodes`` may be
    classified already (a ``cls`` column), or carry its phase already (returned as it is)."""
    if "phase" in nodes.columns and "cls" in nodes.columns:
        return nodes
    df = nodes if "cls" in nodes.columns else classify(nodes)
    ids = df["id"].to_numpy()
    parents = df["parent"].to_numpy()
    name = df["name"].fill_null("")
    opt = ancestor_any(ids, parents, name.str.contains(OPTIMIZER_RE).to_numpy())
    bwd = ancestor_any(ids, parents, name.str.contains(BACKWARD_RE).to_numpy())
    cpu_phase = np.where(opt, "optimizer", np.where(bwd, "backward", "forward")).astype(object)
    launch_pos = launcher_positions(df)
    on_gpu = df["on_gpu"].fill_null(False).to_numpy()
    phase = np.full(len(df), None, dtype=object)
    has = on_gpu & (launch_pos >= 0)
    phase[has] = cpu_phase[launch_pos[has]]
    phase[on_gpu & (launch_pos < 0)] = "unknown"
    phase[df["cls"].to_numpy() == "comm"] = "communication"
    return df.with_columns(pl.Series("phase", phase.tolist(), dtype=pl.String))


def is_gpu_trace(nodes: pl.DataFrame) -> bool:
    """True when the trace has GPU kernels (else it is analysed in CPU mode)."""
    return bool(nodes.select((pl.col("on_gpu").fill_null(False) & (pl.col("kind") == "kernel")).any()).item())
