"""Traces for the execution-graph tests: nodes written as rows, the edges as a set."""

from __future__ import annotations

from typing import Any

import polars as pl

from charllm_trace.core.model import Trace, TraceMeta

NODE_COLS: dict[str, pl.DataType] = {
    "id": pl.Int64,
    "name": pl.String,
    "kind": pl.String,
    "on_gpu": pl.Boolean,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "device": pl.Int32,
    "stream": pl.Int64,
    "start_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "parent": pl.Int64,
    "correlation": pl.Int64,
    "launch_id": pl.Int64,
    "coll_type": pl.String,
    "pg_name": pl.String,
    "coll_seq": pl.Int64,
}


def N(
    id: int,
    name: str,
    kind: str,
    start: int | None,
    dur: int | None,
    *,
    gpu: bool = False,
    tid: int = 1,
    stream: int | None = None,
    parent: int | None = None,
    corr: int | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """One node row: a CPU op on thread ``tid`` of process 100, or (``gpu``) a GPU op on
    ``stream`` of device 0."""
    row: dict[str, Any] = {
        "id": id,
        "name": name,
        "kind": kind,
        "on_gpu": gpu,
        "pid": 100,
        "tid": None if gpu else tid,
        "device": 0 if gpu else None,
        "stream": stream if gpu else None,
        "start_ns": start,
        "dur_ns": dur,
        "parent": parent,
        "correlation": corr,
    }
    row.update(kw)
    return row


def mk_trace(
    rows: list[dict[str, Any]],
    deps: list[tuple[int, int, str]] = (),  # type: ignore[assignment]
    *,
    rank: int = 0,
    world: int | None = None,
    timed: bool = True,
) -> Trace:
    cols = {c: [r.get(c) for r in rows] for c in NODE_COLS}
    nodes = pl.DataFrame(cols, schema=NODE_COLS)
    d = pl.DataFrame(
        {"node": [a for a, _, _ in deps], "dep": [b for _, b, _ in deps], "kind": [k for _, _, k in deps]},
        schema={"node": pl.Int64, "dep": pl.Int64, "kind": pl.String},
    )
    meta = (
        TraceMeta(rank=rank, world_size=world)
        if timed
        else TraceMeta(rank=rank, has_timestamps=False, clock="none")
    )
    return Trace(nodes=nodes, deps=d, meta=meta)


def edge_set(df: pl.DataFrame, wake: bool = False) -> set[tuple]:
    """The edges as tuples; inferred cross-thread wake-ups left out unless ``wake``."""
    return {
        (r["node"], r["dep"], r["kind"], r["dep_end"], r["node_end"], r["dep_rank"])
        for r in df.iter_rows(named=True)
        if wake or r["kind"] != "wake"
    }


def coll_rank(r: int, launch_at: int, kdur: int, seqs: tuple[int, ...] = (0,), step_dur: int = 1000) -> Trace:
    """A rank with one step [0, step_dur] that launches one all-reduce kernel per sequence number."""
    rows = [N(1, "ProfilerStep#1", "annotation", 0, step_dur)]
    t = launch_at
    for j, seq in enumerate(seqs):
        op, call, kern = 10 + 3 * j, 11 + 3 * j, 12 + 3 * j
        c = dict(coll_type="all_reduce", pg_name="0", coll_seq=seq)
        rows += [
            N(op, "c10d::allreduce_", "cpu_op", t, 10, parent=1, **c),
            N(call, "cudaLaunchKernel", "runtime", t + 2, 5, parent=op, corr=100 + j),
            N(kern, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", t + 10, kdur, gpu=True, stream=20,
              corr=100 + j, **c),
        ]  # fmt: skip
        t += 10 + kdur + 20
    return mk_trace(rows, rank=r, world=len(seqs))
