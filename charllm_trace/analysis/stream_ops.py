"""The GPU operators of one rank, per stream, with the CPU call that launched each: what the
idle-time breakdown (``idle_time.py``) and the launch statistics (``launch_stats.py``) read.

An operator is a kernel, memcpy or memset on a GPU stream (classes ``compute``, ``comm``,
``memcpy``, ``memset``; HTA's ``kernel``/``gpu_memcpy``/``gpu_memset`` categories), with a start
and a duration. Its **launch call** is the CPU node with the same correlation id (the runtime
call: ``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``hipLaunchKernel`` ...; the earliest when
several share it). Its **step** is the GPU-time step window holding its GPU start
(:mod:`~charllm_trace.analysis.step_windows`, the windows every per-step figure uses; an operator
without a launch call, an orphan, goes to the window holding it); under ``hta_compat``, HTA's
rule: the ``ProfilerStep#N`` during which it was launched (the launch call's start, else the
start of its ``launch_id`` node, else its own start).

``hta_compat``: HTA 0.5.0's conventions, as in the overlap analysis: keep only operators whose
launch call started before the last ProfilerStep began (``keep_last_step``: at or before it
ended; not applied with fewer than two steps), drop operators without one, and round every time
inwards to whole µs (starts up, ends down; a sub-µs operator ends before it starts, as in HTA).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext, context_of
from charllm_trace.analysis.step_windows import launch_step_index
from charllm_trace.core.model import Trace

#: The classes of GPU operators on streams.
STREAM_OP_CLASSES = ("compute", "comm", "memcpy", "memset")

#: Columns of the frame ``stream_ops`` returns (sorted by device, stream, start, end).
STREAM_OPS_SCHEMA: dict[str, pl.DataType] = {
    "device": pl.Int64,
    "stream": pl.Int64,  # the stream; a GPU node without one (Chakra ETs) runs on its tid
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "call_start_ns": pl.Int64,  # the launch call's start; null when none is in the trace
    "call_dur_ns": pl.Int64,
    "call_name": pl.String,  # the launch call's name (cudaLaunchKernel ...); null when none
    "step": pl.Int64,  # the step it was launched in; null outside steps
}


def _ceil_us(c: pl.Expr) -> pl.Expr:
    return -((-c) // 1000) * 1000


def _floor_us(c: pl.Expr) -> pl.Expr:
    return (c // 1000) * 1000


def stream_ops(
    source: Trace | RankContext,
    *,
    hta_compat: bool = False,
    keep_last_step: bool = False,
    steps: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, list[str]]:
    """The GPU operators of one rank (a trace, or its :class:`RankContext`: classified nodes
    and step windows computed once; ``STREAM_OPS_SCHEMA``) and notes on what was dropped."""
    ctx = context_of(source)
    trace = ctx.trace
    df = ctx.classified
    steps = trace.steps() if steps is None else steps
    notes: list[str] = []
    gpu = pl.col("on_gpu").fill_null(False)
    ops = (
        df.lazy()
        .filter(
            gpu
            & pl.col("cls").is_in(list(STREAM_OP_CLASSES))
            & pl.col("start_ns").is_not_null()
            & pl.col("dur_ns").is_not_null()
        )
        .select(
            pl.col("device").cast(pl.Int64),
            pl.coalesce("stream", "tid").cast(pl.Int64).alias("stream"),
            "start_ns",
            "dur_ns",
            "correlation",
            "launch_id",
        )
        .collect()
    )
    if ops.height == 0:
        return pl.DataFrame(schema=STREAM_OPS_SCHEMA), notes
    corrs = ops["correlation"].drop_nulls().unique().implode()
    calls = (
        df.lazy()
        .filter(pl.col("correlation").is_in(corrs) & ~gpu & pl.col("start_ns").is_not_null())
        .group_by("correlation")
        .agg(
            pl.col("start_ns").min().alias("call_start_ns"),
            pl.col("dur_ns").sort_by("start_ns").first().alias("call_dur_ns"),
            pl.col("name").sort_by("start_ns").first().alias("call_name"),
        )
    )
    ops = ops.lazy().join(calls, on="correlation", how="left", maintain_order="left").collect()
    # the launch time that places an op in a step: its call, else its launch_id node (looked up
    # only for the ops without a call: one pass over the CPU nodes is what this costs)
    launch = ops["call_start_ns"]
    orphans = ops.filter(pl.col("call_start_ns").is_null() & pl.col("launch_id").is_not_null())
    if hta_compat and steps.height and orphans.height:  # only HTA's launch-time steps need it
        ids = orphans["launch_id"].unique().implode()
        by_id = (
            df.lazy()
            .filter(pl.col("id").is_in(ids) & ~gpu)
            .select(pl.col("id").alias("launch_id"), pl.col("start_ns").alias("_t_launch"))
        )
        launch = (
            ops.lazy()
            .select("launch_id", "call_start_ns")
            .join(by_id, on="launch_id", how="left", maintain_order="left")
            .select(pl.coalesce("call_start_ns", "_t_launch"))
            .collect()
            .to_series()
        )
    ops = ops.with_columns(launch_ns=launch.cast(pl.Int64), end_ns=pl.col("start_ns") + pl.col("dur_ns"))
    if hta_compat:
        if steps.height >= 2:
            t = pl.col("call_start_ns")
            last = int(steps["end_ns"].max()) if keep_last_step else int(steps["start_ns"].max())
            kept = (t <= last) if keep_last_step else (t < last)
            n0 = ops.height
            ops = ops.filter(kept.fill_null(False))
            which = (
                "after the last ProfilerStep ended" if keep_last_step else "after the last ProfilerStep began"
            )
            notes.append(
                f"HTA convention: {n0 - ops.height} GPU operators launched {which} (or never launched) dropped"
            )
        else:
            notes.append("fewer than two ProfilerSteps: HTA's kernel filter not applied (as HTA)")
        call_end = pl.col("call_start_ns") + pl.col("call_dur_ns")
        ops = ops.with_columns(
            start_ns=_ceil_us(pl.col("start_ns")),
            end_ns=_floor_us(pl.col("end_ns")),
            call_start_ns=_ceil_us(pl.col("call_start_ns")),
            _call_end=_floor_us(call_end),
        ).with_columns(
            dur_ns=pl.col("end_ns") - pl.col("start_ns"),
            call_dur_ns=pl.col("_call_end") - pl.col("call_start_ns"),
        )
    step = pl.lit(None, pl.Int64)
    if steps.height and hta_compat:  # HTA: the ProfilerStep of the launch
        idx = launch_step_index(steps, ops["launch_ns"].fill_null(ops["start_ns"]).to_numpy())
        step = pl.Series(np.where(idx >= 0, steps["step"].to_numpy()[np.maximum(idx, 0)], -1), dtype=pl.Int64)
    elif steps.height:  # the GPU-time window holding the operator's start
        win = ctx.windows
        notes.extend(win.notes)
        idx = win.index_of(ops["start_ns"].to_numpy())
        step = pl.Series(np.where(idx >= 0, win.step[np.maximum(idx, 0)], -1), dtype=pl.Int64)
    out = ops.with_columns(step=step).with_columns(
        pl.when(pl.col("step") >= 0).then(pl.col("step")).alias("step")
    )
    out = out.with_row_index("_i").sort(["device", "stream", "start_ns", "end_ns", "_i"], nulls_last=True)
    return out.select([pl.col(c).cast(d) for c, d in STREAM_OPS_SCHEMA.items()]), notes


def rank_stream_ops(
    source: Trace | RankContext,
    ops: tuple[pl.DataFrame, list[str]] | None,
    hta_compat: bool,
    keep_last_step: bool,
) -> tuple[int, bool, pl.DataFrame, list[str]]:
    """What the per-stream analyses (idle time, launch statistics) start from: the rank (0 when
    unknown), whether its timeline is simulated, its GPU operators (``ops`` when the caller has
    them, else :func:`stream_ops`) and a copy of their notes, with one more when there are none."""
    trace = source.trace if isinstance(source, RankContext) else source
    rank = trace.meta.rank if trace.meta.rank is not None else 0
    simulated = bool(trace.meta.extra.get("simulated"))
    got, notes = ops or stream_ops(source, hta_compat=hta_compat, keep_last_step=keep_last_step)
    notes = list(notes)
    if got.height == 0:
        notes.append("no GPU operators with timestamps on streams")
    return rank, simulated, got, notes
