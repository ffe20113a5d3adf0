"""The per-stream analyses of a run, bundled for ``analyze_run``: the idle-time breakdown and the
launch statistics of every timed rank, from one ``stream_ops`` frame per rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl

from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.idle_results import IdleTimeResult, LaunchResult
from charllm_trace.analysis.idle_time import idle_time
from charllm_trace.analysis.launch_stats import launch_stats
from charllm_trace.analysis.results import SIMULATED_NOTE, AnalyzeOptions
from charllm_trace.analysis.stream_ops import stream_ops
from charllm_trace.core.model import rank_ranges

#: Why the two analyses are missing from a run without GPU operators on streams.
NO_STREAM_OPS = (
    "no GPU kernels, memcpys or memsets on streams: idle time per stream and launch statistics not computed"
)


def _notes(per_rank: list[tuple[int, list[str]]], multi: bool) -> list[str]:
    ranks_of: dict[str, list[int]] = {}
    for r, notes in per_rank:
        for n in notes:
            ranks_of.setdefault(n, [])
            if r not in ranks_of[n]:
                ranks_of[n].append(r)
    if not multi:
        return list(ranks_of)
    return [f"{'ranks' if len(rs) > 1 else 'rank'} {rank_ranges(rs)}: {n}" for n, rs in ranks_of.items()]


def stream_analyses(
    contexts: Mapping[int, RankContext], options: AnalyzeOptions, *, simulated: bool = False
) -> tuple[IdleTimeResult | None, LaunchResult | None, str | None]:
    """Idle time per stream and launch statistics of the timed ranks' ``contexts``, or ``None``
    and ``None`` with the reason when no rank has GPU operators on streams."""
    parts = [(r, rank_stream_analyses(ctx, options)) for r, ctx in contexts.items()]
    return stream_analyses_from(parts, options, simulated=simulated)


#: One rank's idle time and launch statistics; None without GPU operators on streams.
RankStreams = tuple[IdleTimeResult, LaunchResult] | None


def rank_stream_analyses(ctx: RankContext, options: AnalyzeOptions) -> RankStreams:
    """One timed rank's part of :func:`stream_analyses` (what a worker sends)."""
    kw = {"hta_compat": options.hta_compat}
    trace = ctx.trace
    steps = trace.steps()
    ops = stream_ops(ctx, keep_last_step=options.hta_keep_last_step, steps=steps, **kw)
    if not options.hta_compat:  # queue figures over the same windows
        steps = ctx.windows.frame()
    if ops[0].height == 0:
        return None
    common = {"per_step": options.per_step, "ops": ops, **kw}
    return idle_time(ctx, **common), launch_stats(ctx, steps=steps, **common)


def stream_analyses_from(
    parts: list[tuple[int, RankStreams]],
    options: AnalyzeOptions,
    *,
    simulated: bool = False,
    frames: Callable[[tuple[int, str]], list[pl.DataFrame]] | None = None,
) -> tuple[IdleTimeResult | None, LaunchResult | None, str | None]:
    """:func:`stream_analyses` from every timed rank's :func:`rank_stream_analyses` (in rank order).
    ``frames(path)``: the frames at ``path`` ((0, "streams"), (1, "stats"), (1, "queue")) of the
    parts that are not None, stacked in rank order (``Merge.frames``), where the parts' own are
    not to be read one by one."""
    idle = [(r, p[0]) for r, p in parts if p is not None]
    launch = [(r, p[1]) for r, p in parts if p is not None]
    if not idle:
        return None, None, NO_STREAM_OPS
    if frames is None:
        stacked = [[x.streams for _, x in idle], [x.stats for _, x in launch], [x.queue for _, x in launch]]
    else:
        stacked = [frames((0, "streams")), frames((1, "stats")), frames((1, "queue"))]
    multi = len(parts) > 1
    it = IdleTimeResult(
        streams=pl.concat(stacked[0]),
        kernel_wait_threshold_ns=idle[0][1].kernel_wait_threshold_ns,
        hta_compat=options.hta_compat,
        simulated=simulated,
        notes=_notes([(r, x.notes) for r, x in idle], multi),
    )
    ls = LaunchResult(
        stats=pl.concat(stacked[1]),
        queue=pl.concat(stacked[2]),
        hta_compat=options.hta_compat,
        simulated=simulated,
        notes=_notes([(r, x.notes) for r, x in launch], multi),
    )
    if simulated:
        it.notes.insert(0, SIMULATED_NOTE)
        ls.notes.insert(0, SIMULATED_NOTE)
    return it, ls, None
