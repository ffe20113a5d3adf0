"""Collectives whose device work is not a library kernel (``lone_device_work``).

A collective normally runs on the GPU as an NCCL/RCCL kernel, which names itself
(``ncclDevKernel_AllReduce_…``). A communicator of one rank (NCCL 2.28 on a single GPU, a job
launched with world size 1) launches no such kernel: an out-of-place all_gather or all_reduce is a
``cudaMemcpyAsync`` device-to-device copy and a scaled reduction (``ReduceOp.AVG``,
``PREMUL_SUM``) a small kernel ``oneRankReduce<…>``, both launched from inside the collective's
``record_param_comms`` / ``nccl:`` range. Without this rule such a trace has no communication node
at all, although its host side holds every collective with its sizes and process group.

Rule: a device operation (kernel, memcpy, memset) whose runtime launch lies inside a collective's
context (the nearest ``nccl:``/``rccl:`` annotation, else ``record_param_comms`` with collective
args, else collective ``c10d::`` op among the launch's ancestors) is that collective's device work
when the context launched no library kernel and exactly this one device operation. A context that
launched several is left alone (their bytes cannot be split between them) and counted in the
convert report. An in-place reduction on one rank launches nothing and stays host-only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

#: Kinds of device operation that can carry a collective.
DEVICE_KINDS = ("kernel", "memcpy", "memset")

#: Name prefixes of the host-side ranges that can enclose a collective's launch.
_CONTEXT_PREFIXES = ("nccl:", "rccl:", "hccl:", "c10d::")


def context_key(ctx: list[np.ndarray]) -> np.ndarray:
    """One id per start naming its collective: the annotation, else the record_param_comms, else
    the c10d op (``ctx`` is ``[rpc, ann, c10d]`` as the context walk returns them); -1 for none."""
    rpc, ann, c10d = ctx
    return np.where(ann >= 0, ann, np.where(rpc >= 0, rpc, c10d))


def _inside(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each point lies in the union of the intervals [start, end]."""
    if not len(starts):
        return np.zeros(len(points), dtype=bool)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    k = np.searchsorted(s, points, side="right") - 1
    ok = k >= 0
    out = np.zeros(len(points), dtype=bool)
    out[ok] = points[ok] <= e[k[ok]]
    return out


def _starts_of(ev: pl.DataFrame, ids: np.ndarray) -> np.ndarray:
    """``start_ns`` of the rows of ``ev`` with these ids (unique in ``ev``), -1 where an id is not
    there or its start is null: by position, not a join that hashes the whole table."""
    ev_ids = ev["id"].to_numpy()
    top = int(max(ev_ids.max(initial=-1), ids.max(initial=-1))) + 1
    pos = np.full(top, -1, dtype=np.int64)
    pos[ev_ids] = np.arange(len(ev_ids), dtype=np.int64)
    at = np.where(ids >= 0, pos[np.maximum(ids, 0)], -1)
    start = ev["start_ns"].fill_null(-1).to_numpy()
    return np.where(at >= 0, start[np.maximum(at, 0)], -1)


def lone_device_work(
    ev: pl.DataFrame,
    exclude_ids: np.ndarray,
    taken_keys: np.ndarray,
    contexts: Callable[[np.ndarray], list[np.ndarray]],
) -> tuple[pl.DataFrame, list[np.ndarray], int]:
    """The device operations that are the only device work of a collective without a library kernel.

    ``exclude_ids``: the communication candidates already found (library kernels, gloo ops);
    ``taken_keys``: their context keys; ``contexts``: the context walk for start ids. Returns the
    candidate rows (``id name kind on_gpu start_ns _rt_id tid``), their contexts, and the number of
    collective contexts left alone because they launched several device operations."""
    cols = ["id", "name", "kind", "on_gpu", "start_ns", "_rt_id", "tid"]
    empty = (ev.select(cols).clear(), [np.zeros(0, dtype=np.int64)] * 3, 0)
    names = ev["name"]
    is_ctx = names == "record_param_comms"
    for p in _CONTEXT_PREFIXES:
        is_ctx = is_ctx | names.str.starts_with(p)
    is_ctx = is_ctx & ~ev["on_gpu"]
    if not is_ctx.any():
        return empty
    ctx_ops = ev.filter(is_ctx).select("start_ns", "dur_ns")
    dev = ev.filter(
        pl.col("on_gpu") & pl.col("kind").is_in(DEVICE_KINDS) & pl.col("_rt_id").is_not_null()
    ).select(cols)
    dev = dev.filter(~pl.col("id").is_in(pl.Series(exclude_ids, dtype=pl.Int64).implode()))
    if not dev.height:
        return empty
    # cheap first cut: the runtime launch begins inside some collective context range
    s = ctx_ops["start_ns"].to_numpy()
    inside = _inside(
        _starts_of(ev, dev["_rt_id"].to_numpy()), s, s + ctx_ops["dur_ns"].fill_null(0).to_numpy()
    )
    dev = dev.filter(pl.Series(inside))
    if not dev.height:
        return empty
    ctx = contexts(dev["_rt_id"].to_numpy())
    key = context_key(ctx)
    ok = (key >= 0) & ~np.isin(key, taken_keys)
    uniq, counts = np.unique(key[ok], return_counts=True)
    several = int((counts > 1).sum())
    keep = ok & np.isin(key, uniq[counts == 1])
    mask = pl.Series(keep)
    return dev.filter(mask), [c[keep] for c in ctx], several
