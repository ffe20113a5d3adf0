"""Is the CPU starving the GPU? (issue 24; docs/analyses.md, "CPU scheduler telemetry"). Per step:
how the thread that launches the rank's work spent the step — running, runnable but waiting for a
core, or neither (sleeping, blocked) — and how much of that fell in the GPU's idle time.

- the **launching thread** is the thread of the rank's trace with the most kernel-launch calls
  (runtime calls), else the most CPU operators; its scheduler samples are those of the same
  ``(pid, tid)`` (Kineto records the system thread id);
- the thread's cumulative ``run_ns`` and ``wait_ns`` (schedstat) are interpolated linearly between
  samples, so a step's figure is the counter's increase over the step window: exact at sample
  times, an estimate inside a sampling period (windows shorter than it are smeared);
  ``other_ns`` = window − run − wait (sleeping or blocked);
- **GPU idle** is the part of the window where no GPU activity runs (the union of kernels, copies
  and sets); ``idle_wait_ns`` is the thread's wait during it: time the GPU had nothing to do while
  the thread that should feed it was ready but had no core;
- the cgroup's ``throttled_usec`` increase over the window, when recorded, is ``throttled_ns``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.analysis.step_windows import GPU_ACTIVITY, StepWindows

CPU_WAIT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "tid": pl.Int64,  # the launching thread
    "window_ns": pl.Int64,  # the step's window (GPU time; CPU traces: the step's range)
    "run_ns": pl.Int64,  # the thread on a CPU
    "wait_ns": pl.Int64,  # runnable, waiting for a core
    "other_ns": pl.Int64,  # window - run - wait: sleeping or blocked
    "wait_pct": pl.Float64,  # 100 * wait / window
    "gpu_idle_ns": pl.Int64,  # no GPU activity in the window (null: no GPU activity in the trace)
    "idle_wait_ns": pl.Int64,  # the thread's wait during that idle time
    "throttled_ns": pl.Int64,  # the cgroup throttled during the window (null: not recorded)
}


def launching_thread(classified: pl.DataFrame) -> tuple[int, int] | None:
    """(pid, tid) of the thread with the most runtime calls, else the most CPU operators."""
    cpu = classified.filter(~pl.col("on_gpu").fill_null(False) & pl.col("tid").is_not_null())
    for kind in ("runtime", "cpu_op"):
        top = (
            cpu.filter(pl.col("kind") == kind)
            .group_by("pid", "tid")
            .len()
            .sort("len", "tid", descending=[True, False])
        )
        if top.height:
            pid, tid, _ = top.row(0)
            return (int(pid) if pid is not None else -1), int(tid)
    return None


def _delta(t: np.ndarray, v: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Increase of the cumulative counter ``v`` (sampled at ``t``) over each ``[a, b)``."""
    return (np.interp(b, t, v) - np.interp(a, t, v)).round().astype(np.int64)


def gpu_idle_intervals(classified: pl.DataFrame, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The parts of ``[lo, hi)`` outside the union of GPU activity intervals (None: no GPU activity)."""
    act = classified.filter(
        pl.col("on_gpu").fill_null(False)
        & pl.col("cls").is_in(list(GPU_ACTIVITY))
        & pl.col("dur_ns").is_not_null()
    ).sort("start_ns")
    if act.height == 0:
        return None
    s = act["start_ns"].to_numpy().astype(np.int64)
    e = np.maximum.accumulate(s + act["dur_ns"].to_numpy().astype(np.int64))
    a, b = np.concatenate(([lo], e)), np.concatenate((s, [hi]))  # before, between and after them
    keep = b > a
    return a[keep], b[keep]


def cpu_wait(
    rank: int,
    classified: pl.DataFrame,
    windows: StepWindows,
    threads: pl.DataFrame,
    cgroup: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, list[str]]:
    """Per step (CPU_WAIT_SCHEMA) and notes, from the rank's classified nodes, its step windows and
    the run's thread samples (``converters.cpu_sched.read_cpu_sched``)."""
    who = launching_thread(classified)
    if who is None or windows.n == 0:
        return pl.DataFrame(schema=CPU_WAIT_SCHEMA), ["no launching thread or no steps: no CPU wait per step"]
    pid, tid = who
    mine = threads.filter((pl.col("tid") == tid) & ((pl.col("pid") == pid) | (pid < 0)))
    mine = mine.filter(pl.col("run_ns").is_not_null() & pl.col("wait_ns").is_not_null()).sort("time_ns")
    if mine.height < 2:
        return pl.DataFrame(schema=CPU_WAIT_SCHEMA), [
            f"rank {rank}: no scheduler samples of its launching thread {tid}"
        ]
    t = mine["time_ns"].to_numpy()
    a, b = windows.start, windows.end
    run = _delta(t, mine["run_ns"].to_numpy(), a, b)
    wait = _delta(t, mine["wait_ns"].to_numpy(), a, b)
    out = {"rank": rank, "step": windows.step, "tid": tid, "window_ns": b - a, "run_ns": run, "wait_ns": wait,
           "other_ns": np.maximum(b - a - run - wait, 0), "wait_pct": 100.0 * wait / np.maximum(b - a, 1)}  # fmt: skip
    idle = gpu_idle_intervals(classified, int(a.min()), int(b.max()))
    if idle is not None:
        _, k, ps, pe = windows.pieces(*idle)
        out["gpu_idle_ns"] = np.bincount(k, weights=pe - ps, minlength=windows.n).astype(np.int64)
        w = _delta(t, mine["wait_ns"].to_numpy(), ps, pe)
        out["idle_wait_ns"] = np.bincount(k, weights=w, minlength=windows.n).astype(np.int64)
    if cgroup is not None and cgroup.height >= 2 and cgroup["throttled_usec"].is_not_null().all():
        cg = cgroup.sort("time_ns")
        out["throttled_ns"] = 1000 * _delta(cg["time_ns"].to_numpy(), cg["throttled_usec"].to_numpy(), a, b)
    notes = []
    outside = int(((a < t[0]) | (b > t[-1])).sum())
    if outside:
        notes.append(
            f"rank {rank}: {outside} step windows reach outside the sampled time (counted as no change there)"
        )
    df = pl.DataFrame({k: v for k, v in out.items() if not np.isscalar(v)}).with_columns(
        rank=pl.lit(rank, pl.Int64), tid=pl.lit(tid, pl.Int64)
    )
    return df.select(
        [
            (pl.col(c) if c in df.columns else pl.lit(None)).cast(ty).alias(c)
            for c, ty in CPU_WAIT_SCHEMA.items()
        ]
    ), notes
