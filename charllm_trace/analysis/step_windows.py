"""Per-step windows on GPU time: the one definition of "step k" that every per-step figure uses
(overlap, bandwidth, energy, power; docs/analyses.md, "Steps").

A ``ProfilerStep#N`` range is CPU time: the GPU runs the work a step launched later, often while
the CPU is already in the next step. Assigning GPU operators to steps by launch time (HTA's rule)
makes the steps overlap on the GPU, so per-step spans add up to more than the trace and a step's
"idle" is not GPU idle. Here:

- the **launch time** of a GPU operator is the start of the CPU call that launched it (the
  correlated runtime call, else its ``launch_id`` node); it is launched by step k when that
  time falls in step k's ``ProfilerStep`` range;
- step k's GPU window starts at g_k, the first start of the GPU activity (kernels, memcpys,
  memsets) launched by step k, made non-decreasing over the steps (g_k = max(g_k, g_(k-1)));
  steps that launched nothing have no window;
- it ends where the next window starts; the last window ends at the last end of the GPU
  activity launched by any step;
- so windows are disjoint and cover the GPU timeline from the first to the last; a GPU figure
  of step k is the figure of the GPU time inside its window (intervals are clipped to it), and
  an operator belongs to the window holding its GPU start, whether or not it has a launcher
  (**orphans**, e.g. kernels whose launch the profiler lost, are counted in the notes).

Without GPU activity (CPU traces), or when no GPU activity is linked to a launch inside a step,
the windows are the ``ProfilerStep`` ranges themselves (CPU time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from charllm_trace.core.model import Trace

#: the classes (core.classify) of GPU activity: what defines and fills GPU windows
GPU_ACTIVITY = ("compute", "comm", "memcpy", "memset")


def launch_times(nodes: pl.DataFrame) -> pl.Series:
    """For each node, when the CPU call that launched it began (ns).

    GPU nodes: the CPU node with the same correlation id (the runtime launch), else
    the node named by ``launch_id``; CPU nodes: their own start.
    """
    base = nodes.select("id", "on_gpu", "correlation", "launch_id", "start_ns")
    cpu = base.filter(~pl.col("on_gpu").fill_null(False))
    by_corr = (
        cpu.filter(pl.col("correlation").is_not_null() & pl.col("start_ns").is_not_null())
        .group_by("correlation")
        .agg(pl.col("start_ns").min().alias("_t_corr"))
    )
    by_id = cpu.select(pl.col("id").alias("launch_id"), pl.col("start_ns").alias("_t_launch"))
    df = base.join(by_corr, on="correlation", how="left", maintain_order="left").join(
        by_id, on="launch_id", how="left", maintain_order="left"
    )
    t = (
        pl.when(pl.col("on_gpu").fill_null(False))
        .then(pl.coalesce("_t_corr", "_t_launch"))
        .otherwise(pl.col("start_ns"))
    )
    return df.select(t.alias("launch_ns"))["launch_ns"]


def launch_times_of(nodes: pl.DataFrame, gpu_rows: pl.DataFrame) -> pl.Series:
    """``launch_times`` of ``gpu_rows`` (GPU nodes of ``nodes``, with their correlation and
    launch_id), looked up in the CPU nodes of ``nodes`` without copying the whole table: by
    correlation (the CPU rows that carry one: runtime calls), then by ``launch_id`` for the few
    rows left."""
    cpu = nodes.lazy().filter(~pl.col("on_gpu").fill_null(False) & pl.col("start_ns").is_not_null())
    by_corr = (
        cpu.filter(pl.col("correlation").is_not_null())
        .group_by("correlation")
        .agg(pl.col("start_ns").min().alias("_t_corr"))
    )
    got = (
        gpu_rows.lazy()
        .select("correlation", "launch_id")
        .join(by_corr, on="correlation", how="left", maintain_order="left")
        .collect()
    )
    t = got["_t_corr"].alias("launch_ns")
    miss = t.is_null() & got["launch_id"].is_not_null()
    if not miss.any():
        return t
    launchers = got["launch_id"].filter(miss).unique().implode()
    by_id = (
        cpu.filter(pl.col("id").is_in(launchers))
        .select(pl.col("id").alias("launch_id"), pl.col("start_ns").alias("_t_launch"))
        .collect()
    )
    t2 = got.select("launch_id").join(by_id, on="launch_id", how="left", maintain_order="left")["_t_launch"]
    return pl.select(pl.coalesce(t, t2).alias("launch_ns")).to_series()


def launch_step_index(steps: pl.DataFrame, t: np.ndarray) -> np.ndarray:
    """Index (into ``steps``, sorted by start) of the ``ProfilerStep`` range holding each time
    ``t``, -1 for none: how HTA assigns iterations (by launch time) and CPU ops to steps."""
    if steps.height == 0:
        return np.full(t.size, -1, dtype=np.int64)
    s0, s1 = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    idx = np.searchsorted(s0, t, side="right") - 1
    ok = (idx >= 0) & (t < s1[np.maximum(idx, 0)])
    return np.where(ok, idx, -1)


@dataclass(frozen=True)
class StepWindows:
    """Disjoint windows, sorted: ``step`` numbers and ``[start, end)`` in ns. ``basis``: "gpu"
    (GPU-time windows) or "cpu" (the ``ProfilerStep`` ranges: a trace without GPU activity)."""

    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    basis: str
    notes: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return int(self.step.size)

    def index_of(self, t: np.ndarray) -> np.ndarray:
        """Index of the window holding each time ``t`` (an operator's start), -1 for none."""
        t = np.asarray(t, dtype=np.int64)
        if self.n == 0:
            return np.full(t.size, -1, dtype=np.int64)
        idx = np.searchsorted(self.start, t, side="right") - 1
        ok = (idx >= 0) & (t < self.end[np.maximum(idx, 0)])
        return np.where(ok, idx, -1)

    def step_of(self, t: np.ndarray) -> list[int | None]:
        """The step number of the window holding each time ``t`` (None outside every window)."""
        idx = self.index_of(t)
        steps = self.step.tolist()
        return [steps[i] if i >= 0 else None for i in idx.tolist()]

    def pieces(self, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Intervals ``[s, e)`` clipped to each window they meet: (interval index, window index,
        piece start, piece end) per piece. Vectorised (searchsorted + repeat)."""
        s, e = np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)
        if self.n == 0 or s.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return z, z, z, z
        first = np.searchsorted(self.end, s, side="right")  # first window ending after s
        # last window starting before e (a zero-length interval: the window holding it)
        last = np.searchsorted(self.start, np.maximum(e, s + 1), side="left") - 1
        cnt = np.maximum(last - first + 1, 0)
        src = np.repeat(np.arange(s.size, dtype=np.int64), cnt)
        off = np.arange(src.size, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        k = first[src] + off
        return src, k, np.maximum(s[src], self.start[k]), np.minimum(e[src], self.end[k])

    def frame(self) -> pl.DataFrame:
        """step, start_ns, end_ns (the windows)."""
        return pl.DataFrame(
            {"step": self.step, "start_ns": self.start, "end_ns": self.end},
            schema={"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        )


def gpu_windows(
    steps: pl.DataFrame, start: np.ndarray, end: np.ndarray, launch: np.ndarray, launched: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The definition: (step, window start, window end) from the ``ProfilerStep`` ranges
    ``steps`` (sorted by start) and the GPU activity's start, end and launch time (``launched``:
    False where an operator has no launcher; its launch time is then ignored)."""
    k = np.where(launched, launch_step_index(steps, launch), -1)
    m = k >= 0
    if not m.any():
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    first = np.full(steps.height, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, k[m], start[m])
    has = first < np.iinfo(np.int64).max
    g = np.maximum.accumulate(first[has])
    last_end = max(int(end[m].max()), int(g[-1]))
    w1 = np.append(g[1:], last_end)
    keep = w1 > g  # a window emptied by the ordering (its activity started after the next's)
    return steps["step"].to_numpy()[has][keep], g[keep], w1[keep]


def step_windows(trace: Trace, classified: pl.DataFrame) -> StepWindows:
    """The step windows of one rank (``classified``: ``classify(trace.nodes)``, with ``cls``)."""
    steps = trace.steps()
    if steps.height == 0:
        z = np.zeros(0, dtype=np.int64)
        return StepWindows(z, z, z, "gpu")
    act = (
        classified.lazy()
        .filter(
            pl.col("on_gpu").fill_null(False)
            & pl.col("cls").is_in(list(GPU_ACTIVITY))
            & pl.col("start_ns").is_not_null()
            & pl.col("dur_ns").is_not_null()
        )
        .select("start_ns", "dur_ns", "correlation", "launch_id")
        .collect()
    )
    if act.height == 0:
        return StepWindows(
            steps["step"].to_numpy(), steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy(), "cpu"
        )
    # correlation 0 is "none" (as in converters/build_steps.link_gpu): it names no launcher
    act = act.with_columns(correlation=pl.when(pl.col("correlation") != 0).then(pl.col("correlation")))
    lt = launch_times_of(classified, act)
    s = act["start_ns"].to_numpy().astype(np.int64)
    e = s + act["dur_ns"].to_numpy().astype(np.int64)
    launched = lt.is_not_null().to_numpy()
    step, w0, w1 = gpu_windows(steps, s, e, lt.fill_null(0).to_numpy().astype(np.int64), launched)
    if step.size == 0:
        return StepWindows(
            steps["step"].to_numpy(),
            steps["start_ns"].to_numpy(),
            steps["end_ns"].to_numpy(),
            "cpu",
            (
                "no GPU activity is linked to a launching CPU call inside a ProfilerStep: "
                "the step windows are the ProfilerStep ranges (CPU time)",
            ),
        )
    win = StepWindows(step, w0, w1, "gpu")
    notes = []
    n_orphan = int((~launched).sum())
    if n_orphan:
        out = int((win.index_of(s[~launched]) < 0).sum())
        ms = float((e - s)[~launched].sum()) / 1e6
        notes.append(
            f"{n_orphan} GPU operators ({ms:.3f} ms) have no launching CPU call in the trace (orphans): "
            f"each counts in the step window holding its GPU start"
            + (f" ({out} outside every window)" if out else "")
        )
    if step.size < steps.height:
        notes.append(f"{steps.height - step.size} ProfilerSteps launched no GPU activity: no GPU window")
    return StepWindows(step, w0, w1, "gpu", tuple(notes))
