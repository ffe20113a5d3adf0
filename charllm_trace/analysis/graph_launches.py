"""CUDA/HIP graph launches (issue 24 item 2; docs/analyses.md, "Graph launches"). A graph launch
call (``cudaGraphLaunch``, ``cuGraphLaunch``, ``hipGraphLaunch``) starts many GPU operators; the
profiler gives each of them the call's correlation id, so they are tied to it by that id (the
CPU node with the id is the call, as for any launch: ``stream_ops``). Per launch:

- ``n_kernels``: the GPU activity (kernels, copies, sets) with its correlation;
- ``call_dur_ns``: the call's own duration; ``launch_to_first_ns``: from the call's start to the
  first of its kernels' starts;
- ``span_ns``: first start to last end; ``busy_ns``: the union of its kernels' intervals (all its
  streams together); ``idle_ns`` = span − busy: the GPU time inside the launch with none of its
  kernels running (another stream's work may run then);
- its step: the step window holding its first kernel's start (as every GPU figure).

Per kernel: its index in start order, its start since the call, and the gap since the latest end
of the launch's earlier kernels. The launch statistics count these kernels apart from individually
launched ones (``launch_stats``: a graph launch is not one launch of one kernel). Vectorised.
"""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.graph_launch_results import (
    GRAPH_KERNEL_SCHEMA,
    GRAPH_LAUNCH_SCHEMA,
    GraphLaunchResult,
)
from charllm_trace.analysis.registry import Merge
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.analysis.step_windows import GPU_ACTIVITY, StepWindows, step_windows
from charllm_trace.core.model import Trace

#: graph launch calls (CUDA runtime and driver, HIP), matched on the call's name
GRAPH_LAUNCH_RE = r"^(?:cuda|cu|hip)GraphLaunch"


def graph_kernels(classified: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the graph launch calls: correlation, call_name, call_start_ns, call_dur_ns; their GPU
    activity: correlation, name, stream, start_ns, dur_ns, end_ns)."""
    gpu = pl.col("on_gpu").fill_null(False)
    calls = (
        classified.lazy()
        .filter(
            ~gpu
            & pl.col("correlation").is_not_null()
            & pl.col("start_ns").is_not_null()
            & pl.col("name").str.contains(GRAPH_LAUNCH_RE)
        )  # fmt: skip
        .group_by("correlation")
        .agg(
            pl.col("name").sort_by("start_ns").first().alias("call_name"),
            pl.col("start_ns").min().alias("call_start_ns"),
            pl.col("dur_ns").sort_by("start_ns").first().alias("call_dur_ns"),
        )  # fmt: skip
        .collect()
    )
    if calls.height == 0:
        return calls, pl.DataFrame()
    ks = classified.filter(
        gpu & pl.col("cls").is_in(list(GPU_ACTIVITY)) & pl.col("start_ns").is_not_null()
        & pl.col("dur_ns").is_not_null() & pl.col("correlation").is_in(calls["correlation"].implode())
    ).select("correlation", "name", pl.coalesce("stream", "tid").cast(pl.Int64).alias("stream"), "start_ns",
             "dur_ns", end_ns=pl.col("start_ns") + pl.col("dur_ns"))  # fmt: skip
    return calls, ks.sort("correlation", "start_ns", "end_ns")


def _busy(ks: pl.DataFrame) -> pl.DataFrame:
    """|union of intervals| per correlation (``ks`` sorted by correlation, start)."""
    reach = pl.col("end_ns").cum_max().over("correlation")
    new = (pl.col("start_ns") > reach.shift(1).over("correlation")).fill_null(True)
    return (
        ks.with_columns(_run=new.cast(pl.Int64).cum_sum().over("correlation"))
        .group_by("correlation", "_run")
        .agg(pl.col("start_ns").min().alias("s"), pl.col("end_ns").max().alias("e"))
        .group_by("correlation")
        .agg((pl.col("e") - pl.col("s")).sum().alias("busy_ns"))
    )


def rank_graph_launches(
    rank: int, trace: Trace, classified: pl.DataFrame, windows: StepWindows | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """One rank's launches (GRAPH_LAUNCH_SCHEMA), their kernels (GRAPH_KERNEL_SCHEMA) and notes
    (``windows``: the rank's step windows, cut here when not given)."""
    calls, ks = graph_kernels(classified)
    empty = pl.DataFrame(schema=GRAPH_LAUNCH_SCHEMA), pl.DataFrame(schema=GRAPH_KERNEL_SCHEMA)
    if calls.height == 0:
        return *empty, []
    n_none = calls.height - (ks["correlation"].n_unique() if ks.height else 0)
    notes = (
        [f"rank {rank}: {n_none} graph launch calls have no GPU activity in the trace (not listed)"]
        if n_none
        else []
    )
    if ks.height == 0:
        return *empty, notes
    per = ks.group_by("correlation").agg(
        pl.len().alias("n_kernels"), pl.col("start_ns").min().alias("first_start_ns"),
        pl.col("end_ns").max().alias("last_end_ns"), pl.col("dur_ns").sum().alias("kernel_ns"),
    )  # fmt: skip
    win = windows if windows is not None else step_windows(trace, classified)
    out = (
        calls.join(per, on="correlation").join(_busy(ks), on="correlation")
        .with_columns(launch_to_first_ns=pl.col("first_start_ns") - pl.col("call_start_ns"),
                      span_ns=pl.col("last_end_ns") - pl.col("first_start_ns"))
        .with_columns(idle_ns=pl.col("span_ns") - pl.col("busy_ns"), rank=pl.lit(rank, pl.Int64))
        .sort("first_start_ns", "correlation")
    )  # fmt: skip
    out = out.with_columns(step=pl.Series(win.step_of(out["first_start_ns"].to_numpy()), dtype=pl.Int64))
    prev = pl.col("end_ns").cum_max().shift(1).over("correlation")
    kern = ks.join(calls.select("correlation", "call_start_ns"), on="correlation").with_columns(
        index=pl.int_range(pl.len()).over("correlation"), since_call_ns=pl.col("start_ns") - pl.col("call_start_ns"),
        gap_ns=pl.col("start_ns") - prev, rank=pl.lit(rank, pl.Int64),
    )  # fmt: skip
    return _cast(out, GRAPH_LAUNCH_SCHEMA), _cast(kern, GRAPH_KERNEL_SCHEMA), notes


def _cast(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return df.select([pl.col(c).cast(t) for c, t in schema.items()])


def rank_part(ctx: RankContext, options: AnalyzeOptions) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """The registry's per-rank function of ``graph_launches`` (``analysis/registry.py``)."""
    return rank_graph_launches(ctx.rank, ctx.trace, ctx.classified, ctx.windows)


def merge(m: Merge) -> GraphLaunchResult | None:
    """The registry's merge of ``graph_launches``: every rank's launches; None when no rank has
    one (the result is optional: nothing in ``skipped``)."""
    return graph_launches_from([p.parts["graph_launches"] for p in m.parts if "graph_launches" in p.parts])


def graph_launches_from(
    parts: list[tuple[pl.DataFrame, pl.DataFrame, list[str]]],
) -> GraphLaunchResult | None:
    """The run's result from every rank's part (in rank order); None when no rank has a launch."""
    if not any(p[0].height or p[2] for p in parts):
        return None
    lf, kf = pl.concat([p[0] for p in parts]), pl.concat([p[1] for p in parts])
    return GraphLaunchResult(lf, kf, notes=[n for p in parts for n in p[2]])
