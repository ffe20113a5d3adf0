"""The lags of a what-if: every edge of the run graph with its scalable part re-timed.

``lag = round(base x factor) + fixed + added`` per edge, where

- ``factor`` is the factor of the edge's what-if class (``CLASS=FACTOR``); on an edge of a
  collective whose process group is of a named dimension (``dp=0.5``), that dimension's factor;
  with a bandwidth (``comm=100GB/s``, ``dp=50GB/s``), the collective's transfer is re-timed:
  ``new transfer (ns) = bytes x bus factor / BW (GB/s)`` (the message size and nccl-tests bus
  factor of :mod:`charllm_trace.analysis.bandwidth`; GB = 1e9 bytes), and every edge of the
  collective's own time scales by ``new transfer / measured transfer``. The measured transfer is
  the collective edge's lag (``graph.run``: the shortest duration among the participants),
  else the node's own time on its lane.
- ``added`` is ``cpu_op+=TIME`` on the edge that leaves every CPU operator's start (its first
  child or its end come that much later: a fixed cost at the start of every op).
- ``fixed`` (waits the graph does not explain) never changes.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from charllm_trace.analysis.bandwidth import collectives
from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.parallel import name_groups
from charllm_trace.analysis.whatif_keys import ADD_NS, DIM_KEYS, GBPS, class_factors
from charllm_trace.core.errors import UsageError
from charllm_trace.core.model import Run
from charllm_trace.graph import points as P
from charllm_trace.graph.lanes import pos_of
from charllm_trace.graph.run import RunGraph


def factor_array(factors: Mapping[str, float]) -> np.ndarray:
    """The factor of every what-if class (``CLASS=FACTOR`` keys; aliases expanded, in order)."""
    arr = np.ones(len(P.WHATIF_CLASSES), dtype=np.float64)
    for name, f in class_factors(factors).items():
        for c in P.WHATIF_ALIASES.get(name, (name,)):
            arr[P.WC[c]] = f
    return arr


def _node_offsets(rg: RunGraph) -> tuple[dict[int, int], int]:
    off, k = {}, 0
    for r in rg.ranks:
        off[r] = k
        k += len(rg.parts[r].rows)
    return off, k


def _comm_nodes(
    rg: RunGraph, run: Run, dims: Mapping[str, str | None], classified: Mapping[int, pl.DataFrame]
) -> pl.DataFrame:
    """(node: index over the run's active nodes, dim, bytes x bus factor, is an instance) of every
    node with a process group and every collective instance: the dimension from its group, the
    message size and bus factor where it is an instance (``bandwidth.collectives``; null elsewhere).
    ``classified``: the ranks' classified nodes where the caller has them (not classified again)."""
    off, _ = _node_offsets(rg)
    frames = []
    for r in rg.ranks:
        nodes = run.traces[r].nodes
        if "pg_name" not in nodes.columns:
            continue
        part = rg.parts[r]
        tr = run.traces[r]
        coll, _ = collectives(RankContext(tr, classified[r]) if r in classified else tr, group_dims=dims)
        pos = pos_of(part.ids, coll["id"].to_numpy().astype(np.int64))
        bus = np.full(len(part.rows), np.nan)
        ok = pos >= 0
        inst = np.zeros(len(part.rows), bool)
        inst[pos[ok]] = True
        bus[pos[ok]] = (coll["bytes"].cast(pl.Float64) * coll["bus_factor"]).fill_null(np.nan).to_numpy()[ok]
        pg = nodes["pg_name"]
        dim = pg.gather(part.rows).replace_strict(dict(dims), default=None, return_dtype=pl.String)
        frames.append(
            pl.DataFrame({"dim": dim, "bus_bytes": bus, "inst": inst})
            .with_columns(
                node=pl.int_range(pl.len(), dtype=pl.Int64) + off[r],
                has_pg=pg.gather(part.rows).is_not_null(),
            )
            .filter(pl.col("has_pg") | pl.col("inst"))
            .drop("has_pg")
        )
    schema = {"dim": pl.String, "bus_bytes": pl.Float64, "inst": pl.Boolean, "node": pl.Int64}
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _measured_transfer(rg: RunGraph, edge_node: np.ndarray, comm: np.ndarray, n_nodes: int) -> np.ndarray:
    """Per node: its collective edge's lag (the transfer), else its comm-class time on its lane."""
    g = rg.g
    coll = comm & (g.kind == P.EK["collective"])
    lane = comm & ~coll & (g.kind != P.EK["launch"])
    on_coll = np.zeros(n_nodes, np.int64)
    np.maximum.at(on_coll, edge_node[coll], g.base[coll])
    own = np.zeros(n_nodes, np.int64)
    np.add.at(own, edge_node[lane], g.base[lane])
    has = np.zeros(n_nodes, bool)
    has[edge_node[coll]] = True
    return np.where(has, on_coll, own)


def _dim_factors(
    cn: pl.DataFrame, factors: Mapping[str, float], node_f: np.ndarray, new_ns: np.ndarray, notes: list[str]
) -> None:
    """Per node: the factor of its dimension (``dp=0.5``) and the transfer its bandwidth gives."""
    node = cn["node"].to_numpy()
    dims_of = cn["dim"].fill_null("").str.split("+")
    dim = cn["dim"].drop_nulls().unique().to_list()
    inst = cn["inst"].to_numpy()
    tr_ns = cn["bus_bytes"].fill_nan(None).fill_null(np.nan).to_numpy()  # bytes x bus factor
    for key in ("comm", *DIM_KEYS):
        if key in DIM_KEYS and (key in factors or key + GBPS in factors):
            hit = dims_of.list.contains(key).to_numpy()
            if not hit.any():
                known = sorted({d for d in dim if d}) or ["none"]
                raise UsageError(
                    f"--what-if: {key}: the run has no {key} process group (dimensions of its collectives: "
                    f"{', '.join(known)}; name them with --parallel)"
                )
        else:
            hit = np.ones(len(node), bool) if key == "comm" else np.zeros(len(node), bool)
        if key in factors and key in DIM_KEYS:  # a dimension's factor wins over comm=BW
            node_f[node[hit]] = factors[key]
            new_ns[node[hit]] = np.nan
        if key + GBPS in factors:
            ok = hit & np.isfinite(tr_ns)
            new_ns[node[ok]] = tr_ns[ok] / factors[key + GBPS]
            left = int((hit & inst & ~ok).sum())
            if left:
                notes.append(
                    f"{left} collectives without a message size or group size were not re-timed by "
                    f"{key}={factors[key + GBPS]:g} GB/s (kept as measured)"
                )


def _comm_scale(
    rg: RunGraph, run: Run, factors: Mapping[str, float], dims: Mapping[str, str | None], per: np.ndarray,
    notes: list[str], classified: Mapping[int, pl.DataFrame] | None = None,
) -> None:  # fmt: skip
    g = rg.g
    off, n_nodes = _node_offsets(rg)
    comm = (g.wclass == P.WC["comm"]) & (g.owner >= 0)
    ranks = rg.owner_rank.astype(np.int64)
    base_of = np.zeros(int(ranks.max(initial=0)) + 1, np.int64)
    for r, o in off.items():
        base_of[r] = o
    edge_node = np.where(comm, base_of[np.clip(ranks, 0, len(base_of) - 1)] + g.owner, 0)
    node_f = np.full(n_nodes, np.nan)
    new_ns = np.full(n_nodes, np.nan)
    _dim_factors(_comm_nodes(rg, run, dims, classified or {}), factors, node_f, new_ns, notes)
    old = _measured_transfer(rg, edge_node, comm, n_nodes)
    bw = np.isfinite(new_ns) & (old > 0)
    node_f[bw] = new_ns[bw] / old[bw]
    f_e = node_f[edge_node]
    take = comm & np.isfinite(f_e)
    per[take] = f_e[take]


def _cpu_op_add(rg: RunGraph, run: Run, add_ns: int) -> np.ndarray:
    """``add_ns`` on the lane edge leaving every CPU operator's start point."""
    g = rg.g
    is_start = np.zeros(g.n_points, bool)
    for r in rg.ranks:
        part = rg.parts[r]
        nodes = run.traces[r].nodes
        kind = nodes["kind"].to_numpy()[part.rows]
        on_gpu = nodes["on_gpu"].fill_null(False).to_numpy()[part.rows]
        i = np.flatnonzero((kind == "cpu_op") & ~on_gpu)
        is_start[rg.offsets[r] + 2 * i] = True
    lane_out = is_start[g.src] & np.isin(g.kind, [P.EK["span"], P.EK["nesting"]])
    return np.where(lane_out, add_ns, 0).astype(np.int64)


def edge_lags(
    rg: RunGraph,
    run: Run,
    factors: Mapping[str, float],
    dims: Mapping[str, str | None] | None = None,
    classified: Mapping[int, pl.DataFrame] | None = None,
) -> tuple[np.ndarray, list[str]]:
    """The lag of every edge under the what-if (module docstring), and notes on what it left out.
    ``dims``: process group -> dimension (``analysis.parallel``; by default from the groups' names)."""
    g = rg.g
    f = factor_array(factors)
    per = np.where(g.wclass >= 0, f[np.maximum(g.wclass, 0)], 1.0)
    notes: list[str] = []
    if any(k in DIM_KEYS or k.endswith(GBPS) for k in factors):
        if dims is None:
            dims = name_groups({pg.name: pg for tr in run for pg in tr.meta.process_groups}.values())
        _comm_scale(rg, run, factors, dims, per, notes, classified)
    lags = np.rint(g.base * per).astype(np.int64) + g.fixed
    add = factors.get("cpu_op" + ADD_NS)
    if add:
        lags += _cpu_op_add(rg, run, int(add))
    return lags, notes
