"""Launch statistics per GPU stream: how long the CPU's launches take to reach the GPU, and how
many launched operators wait on each stream (docs/analyses.md, "Launch statistics").

For each GPU operator with a launch call (``stream_ops``):

- **launch delay** = op start − launch call start (the CPU's runtime call, e.g.
  ``cudaLaunchKernel``); under ``hta_compat`` HTA's definition instead: op start − launch call
  end, clipped at 0 (``launch_delay``), over the operators of HTA's four launch calls only
  (``HTA_LAUNCH_CALLS``; a note counts the others); its distribution per (rank, step, stream): mean, p50, p90, p99 (linear
  interpolation between order statistics, as numpy and pandas, rounded to ns) and max;
- **shorter than its launch**: the op's duration < its launch call's duration (the CPU cannot
  launch such operators as fast as the GPU runs them);
- operators started by a **graph launch** (``cudaGraphLaunch`` ...: one call, many operators
  sharing its correlation) are counted apart: in ``n_ops`` and the queue, in no delay or
  shorter-than-launch figure (``n_launched`` leaves them out); a note counts them, and
  ``analysis/graph_launches.py`` gives their figures per launch and per kernel;
- **queue length**: the number of operators launched and not finished, q(t) = #{ops: launch ≤ t
  < end} (an op without a launch call counts from its start), per stream and for all streams of
  the rank; its maximum and time-weighted mean over a window: the step's window for a step row
  (the GPU-time step window, ``step_windows``; the ProfilerStep range under ``hta_compat``), first launch to last end for the whole trace, and ``QUEUE_BINS`` equal bins over the rank's
  window for the time series.

Vectorised: the queue is a sorted list of +1/−1 events per stream and a cumulative sum; window
figures from its cumulative area (exact, the curve is piecewise constant).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext, context_of
from charllm_trace.analysis.graph_launches import GRAPH_LAUNCH_RE
from charllm_trace.analysis.idle_results import LAUNCH_SCHEMA, QUEUE_SCHEMA, LaunchResult
from charllm_trace.analysis.results import frame
from charllm_trace.analysis.stream_ops import rank_stream_ops
from charllm_trace.core.model import Trace

#: Bins of the queue time series per rank.
QUEUE_BINS = 48


def queue_curve(launch: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The queue q(t) of ops present from ``launch`` to ``end`` (half-open): distinct event
    times ``t`` and the value ``q[i]`` held on ``[t[i], t[i+1])`` (0 after the last)."""
    end = np.maximum(end, launch)
    times = np.concatenate([launch, end])
    delta = np.concatenate([np.ones(launch.size, np.int64), -np.ones(end.size, np.int64)])
    t, inv = np.unique(times, return_inverse=True)
    return t, np.cumsum(np.bincount(inv, weights=delta, minlength=t.size)).round().astype(np.int64)


def window_stats(t: np.ndarray, q: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximum and time-weighted mean of the queue ``(t, q)`` over windows ``[a, b)`` (mean NaN
    for an empty window)."""
    if t.size == 0:
        return np.zeros(a.size, np.int64), np.where(b > a, 0.0, np.nan)
    area = np.concatenate([[0.0], np.cumsum(q[:-1] * np.diff(t).astype(np.float64))])

    def area_at(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(t, x, side="right") - 1
        j = np.maximum(i, 0)
        return np.where(i < 0, 0.0, area[j] + q[j] * (x - t[j]).astype(np.float64))

    width = (b - a).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(width > 0, (area_at(b) - area_at(a)) / width, np.nan)
    lo = np.maximum(np.searchsorted(t, a, side="right") - 1, 0)  # the piece that holds a (0: before t[0])
    hi = np.searchsorted(t, b, side="left") - 1  # the last piece that starts before b
    if a.size == 0:
        return np.zeros(0, np.int64), mean
    # max over q[lo:hi+1] for every window at once: reduceat over (lo, hi+1) pairs, a 0 appended
    idx = np.empty(2 * a.size, np.int64)
    idx[0::2], idx[1::2] = lo, np.maximum(hi + 1, lo)
    red = np.maximum.reduceat(np.append(q, 0), idx)[0::2]
    mx = np.where((hi >= 0) & (b > a), red, 0).astype(np.int64)
    return mx, mean


#: the launch calls HTA 0.5.0 pairs with operators (``get_cuda_kernel_launch_stats``)
HTA_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")


def launch_delay(hta_compat: bool) -> pl.Expr:
    """The launch delay of an operator of ``stream_ops``: from its launch call's start (ours), or
    HTA's from the call's end, clipped at 0."""
    if hta_compat:
        return (pl.col("start_ns") - pl.col("call_start_ns") - pl.col("call_dur_ns")).clip(0)
    return pl.col("start_ns") - pl.col("call_start_ns")


def _delay_stats(ops: pl.DataFrame, keys: list[str], hta_compat: bool) -> pl.DataFrame:
    d = launch_delay(hta_compat)
    has = pl.col("call_start_ns").is_not_null() & ~_graph  # a graph launch's kernels: graph_launches
    if hta_compat:  # HTA counts the operators of its four launch calls only
        has = has & pl.col("call_name").is_in(list(HTA_LAUNCH_CALLS)).fill_null(False)
    shorter = ((pl.col("dur_ns") < pl.col("call_dur_ns")) & has).fill_null(False)
    dl = d.filter(has)
    agg = [
        pl.len().alias("n_ops"),
        has.sum().alias("n_launched"),
        dl.mean().round().alias("delay_mean_ns"),
        *[dl.quantile(q, "linear").round().alias(f"delay_p{int(q * 100)}_ns") for q in (0.5, 0.9, 0.99)],
        dl.max().alias("delay_max_ns"),
        shorter.sum().alias("n_shorter_than_launch"),
    ]
    out = ops.group_by(keys, maintain_order=True).agg(agg) if keys else ops.select(agg)
    n = pl.col("n_launched")
    return out.with_columns(shorter_pct=pl.when(n > 0).then(100.0 * pl.col("n_shorter_than_launch") / n))


#: an operator started by a graph launch (cudaGraphLaunch ...: many operators share one call)
_graph = pl.col("call_name").str.contains(GRAPH_LAUNCH_RE).fill_null(False)


def _graph_note(got: pl.DataFrame) -> list[str]:
    """The note on operators started by graph launches: counted apart (not in any delay figure)."""
    g = got.filter(_graph)
    if g.height == 0:
        return []
    n = g.select(pl.struct("call_start_ns", "call_name").n_unique()).item()
    return [
        f"{g.height} GPU operators were started by {n} graph launches ({g['call_name'][0]} ...): they are "
        "in no launch delay or shorter-than-launch figure (a graph launch starts many operators; per launch "
        "and per kernel: the graph_launches frames), only in the queue"
    ]


def _not_hta_calls(got: pl.DataFrame) -> list[str]:
    """The note on operators launched by calls HTA does not count (``hipLaunchKernel``,
    ``cuLaunchKernel`` ...): under ``hta_compat`` they are in no launch figure, as in HTA."""
    other = got.filter(pl.col("call_name").is_not_null() & ~pl.col("call_name").is_in(list(HTA_LAUNCH_CALLS)))
    if other.height == 0:
        return []
    names = ", ".join(other["call_name"].value_counts(sort=True).head(3)["call_name"].to_list())
    return [
        f"HTA convention: {other.height} GPU operators launched by calls HTA does not count ({names}) "
        "are in no launch figure (HTA knows cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync, "
        "cudaMemsetAsync only)"
    ]


def launch_stats(
    source: Trace | RankContext,
    *,
    per_step: bool = True,
    hta_compat: bool = False,
    hta_keep_last_step: bool = False,
    ops: tuple[pl.DataFrame, list[str]] | None = None,
    bins: int = QUEUE_BINS,
    steps: pl.DataFrame | None = None,
) -> LaunchResult:
    """Launch delays, short operators and queue lengths of one rank (a trace, or its
    :class:`RankContext`; module docstring). ``ops`` may pass ``stream_ops(...)`` made with the
    same ``hta_compat`` options, ``steps`` the step windows (``step_windows(...).frame()``;
    ``trace.steps()`` under ``hta_compat``)."""
    ctx = context_of(source)
    trace = ctx.trace
    rank, simulated, got, notes = rank_stream_ops(ctx, ops, hta_compat, hta_keep_last_step)
    if got.height == 0:
        return LaunchResult(
            frame({}, LAUNCH_SCHEMA), frame({}, QUEUE_SCHEMA), hta_compat, simulated=simulated, notes=notes
        )
    if steps is None and per_step:
        steps = trace.steps()
        if steps.height and not hta_compat:
            steps = ctx.windows.frame()
    steps = steps if per_step else pl.DataFrame()
    got = got.with_columns(
        _q0=pl.min_horizontal(pl.coalesce("call_start_ns", "start_ns"), pl.col("start_ns"))
    )
    keys = ["device", "stream"]
    parts = [
        _delay_stats(got, keys, hta_compat).with_columns(step=None),
        _delay_stats(got, [], hta_compat).with_columns(step=None, device=None, stream=None),
    ]
    if per_step and got["step"].is_not_null().any():
        in_step = got.filter(pl.col("step").is_not_null())
        parts += [
            _delay_stats(in_step, ["step", *keys], hta_compat),
            _delay_stats(in_step, ["step"], hta_compat),
        ]
    stats = pl.concat([p.with_columns(pl.col(pl.Null).cast(pl.Int64)) for p in parts], how="diagonal_relaxed")
    stats = stats.with_columns(pl.col("^delay_.*_ns$").cast(pl.Int64))

    # queue figures: one curve per stream and one for the rank, windows per row and bins
    lo_all, hi_all = int(got["_q0"].min()), int(got["end_ns"].max())
    edges = np.array([lo_all + (hi_all - lo_all) * k // bins for k in range(bins + 1)], np.int64)  # exact
    groups = [(d, s) for d, s in got.select(keys).unique(maintain_order=True).iter_rows()] + [(None, None)]
    win_rows: list[dict] = []
    q_rows: list[dict] = []
    sw = (
        (steps["step"].to_list(), steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy())
        if steps.height
        else None
    )
    for dev, st in groups:
        sub = (
            got
            if st is None and dev is None
            else got.filter((pl.col("device").eq_missing(dev)) & (pl.col("stream").eq_missing(st)))
        )
        t, q = queue_curve(sub["_q0"].to_numpy(), sub["end_ns"].to_numpy())
        a = [int(sub["_q0"].min())]
        b = [int(sub["end_ns"].max())]
        names: list[int | None] = [None]
        if sw is not None:
            names += sw[0]
            a += sw[1].tolist()
            b += sw[2].tolist()
        mx, mean = window_stats(t, q, np.asarray(a, np.int64), np.asarray(b, np.int64))
        for k, name in enumerate(names):
            win_rows.append(
                {"device": dev, "stream": st, "step": name, "queue_max": int(mx[k]),
                 "queue_mean": float(mean[k]), "window_start_ns": a[k], "window_end_ns": b[k]}
            )  # fmt: skip
        bmx, bmean = window_stats(t, q, edges[:-1], edges[1:])
        q_rows.append(
            {"device": [dev] * bins, "stream": [st] * bins, "bin": np.arange(bins), "start_ns": edges[:-1],
             "end_ns": edges[1:], "queue_max": bmx, "queue_mean": bmean}
        )  # fmt: skip
    win = pl.DataFrame(win_rows, schema={"device": pl.Int64, "stream": pl.Int64, "step": pl.Int64,
                                         "queue_max": pl.Int64, "queue_mean": pl.Float64,
                                         "window_start_ns": pl.Int64, "window_end_ns": pl.Int64})  # fmt: skip
    stats = stats.join(
        win, on=["step", "device", "stream"], how="left", nulls_equal=True, maintain_order="left"
    )
    queue = pl.concat([frame(r, QUEUE_SCHEMA) for r in q_rows]).with_columns(rank=pl.lit(rank, pl.Int64))
    queue = queue.with_columns(pl.col("queue_mean").fill_nan(None))
    stats = stats.with_columns(rank=pl.lit(rank, pl.Int64), queue_mean=pl.col("queue_mean").fill_nan(None))
    stats = frame(stats, LAUNCH_SCHEMA)
    n_none = int(got["call_start_ns"].is_null().sum())
    if n_none:
        notes.append(f"{n_none} GPU operators have no launch call in the trace: no launch delay")
    notes.extend(_not_hta_calls(got) if hta_compat else _graph_note(got))
    return LaunchResult(stats, frame(queue, QUEUE_SCHEMA), hta_compat, simulated=simulated, notes=notes)
