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

The same figures over two more kinds of interval (``CpuWaitResult``):

- each **GPU idle interval blamed on the host**: an interval where no GPU activity runs (between
  the first and the last), ended by an operator whose launch call began after the interval began:
  the launch was late (``late_ns`` = call start − interval start, at most the interval) and the GPU
  had nothing to do meanwhile; its step is the window holding its start, its phase the phase range
  (``iterations.PHASES``) holding its start;
- each **phase** (prefill, decode, forward ...): the outermost ranges of the phase, per step (the
  ``ProfilerStep`` / marker range holding the range's start, as the phases frame) and over the
  trace, with the host-blamed idle that began inside them and the thread's wait during it.

:func:`thread_states` cuts the thread's time into running / runnable / sleeping slices for the
Perfetto export: per sampling period the counters' increases, drawn in that order (the order inside
a period is not recorded).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.cpu_wait_results import (
    CPU_WAIT_IDLE_SCHEMA,
    CPU_WAIT_PHASE_SCHEMA,
    CPU_WAIT_SCHEMA,
    CpuWaitResult,
)
from charllm_trace.analysis.iterations import phase_ranges
from charllm_trace.analysis.registry import Merge
from charllm_trace.analysis.step_windows import GPU_ACTIVITY, StepWindows, launch_step_index
from charllm_trace.analysis.stream_ops import stream_ops
from charllm_trace.core.model import Trace


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
    """Increase of the cumulative counter ``v`` (sampled at ``t``) over each ``[a, b)``. Times are
    taken relative to the first sample before becoming float64 (Unix-epoch ns as float64 are
    256 ns apart), counters relative to the first value."""
    t0, v0 = int(t[0]), int(v[0])
    tt, vv = (t - t0).astype(np.float64), (v - v0).astype(np.float64)
    aa, bb = (np.asarray(a) - t0).astype(np.float64), (np.asarray(b) - t0).astype(np.float64)
    return (np.interp(bb, tt, vv) - np.interp(aa, tt, vv)).round().astype(np.int64)


class Samples:
    """The launching thread's cumulative run and wait counters, and the cgroup's throttled time
    (None: not recorded), each with its sample times."""

    def __init__(self, mine: pl.DataFrame, cgroup: pl.DataFrame | None) -> None:
        self.t = mine["time_ns"].to_numpy()
        self.run, self.wait = mine["run_ns"].to_numpy(), mine["wait_ns"].to_numpy()
        self.cg: tuple[np.ndarray, np.ndarray] | None = None
        if cgroup is not None and cgroup.height >= 2 and cgroup["throttled_usec"].is_not_null().all():
            cg = cgroup.sort("time_ns")
            self.cg = cg["time_ns"].to_numpy(), cg["throttled_usec"].to_numpy()

    def state(self, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray | None]:
        """run, wait, other (the rest) and throttled ns over each ``[a, b)``. run and wait are at
        most the interval together (the sampler reads each thread a little after its sample time:
        interpolated inside one period, the two may add up to a little more)."""
        run = np.clip(_delta(self.t, self.run, a, b), 0, b - a)
        wait = np.clip(_delta(self.t, self.wait, a, b), 0, b - a - run)
        thr = None if self.cg is None else 1000 * _delta(*self.cg, a, b)
        return {
            "run_ns": run,
            "wait_ns": wait,
            "other_ns": np.maximum(b - a - run - wait, 0),
            "throttled_ns": thr,
        }

    def period(self) -> int:
        """The median sampling period (ns)."""
        return int(np.median(np.diff(self.t)))

    def outside(self, a: np.ndarray, b: np.ndarray) -> int:
        return int(((a < self.t[0]) | (b > self.t[-1])).sum())


def thread_samples(threads: pl.DataFrame, who: tuple[int, int]) -> pl.DataFrame:
    """The samples of thread ``who`` (pid, tid; pid -1: any) with run and wait, by time."""
    pid, tid = who
    mine = threads.filter((pl.col("tid") == tid) & ((pl.col("pid") == pid) | (pid < 0)))
    return mine.filter(pl.col("run_ns").is_not_null() & pl.col("wait_ns").is_not_null()).sort("time_ns")


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


def _conform(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return df.select(
        [(pl.col(c) if c in df.columns else pl.lit(None)).cast(ty).alias(c) for c, ty in schema.items()]
    )


def _frame(cols: dict[str, object], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return _conform(
        pl.DataFrame({k: v for k, v in cols.items() if v is not None and not np.isscalar(v)}), schema
    )


def _step_rows(
    rank: int, tid: int, classified: pl.DataFrame, windows: StepWindows, sm: Samples
) -> pl.DataFrame:
    a, b = windows.start, windows.end
    out: dict[str, object] = {"step": windows.step, "window_ns": b - a, **sm.state(a, b)}
    out["wait_pct"] = 100.0 * out["wait_ns"] / np.maximum(b - a, 1)  # type: ignore[operator]
    idle = gpu_idle_intervals(classified, int(a.min()), int(b.max()))
    if idle is not None:
        _, k, ps, pe = windows.pieces(*idle)
        out["gpu_idle_ns"] = np.bincount(k, weights=pe - ps, minlength=windows.n).astype(np.int64)
        out["gpu_idle_pct"] = 100.0 * out["gpu_idle_ns"] / np.maximum(b - a, 1)  # type: ignore[operator]
        w = np.clip(_delta(sm.t, sm.wait, ps, pe), 0, pe - ps)
        out["idle_wait_ns"] = np.bincount(k, weights=w, minlength=windows.n).astype(np.int64)
    df = _frame(out, CPU_WAIT_SCHEMA)
    return df.with_columns(rank=pl.lit(rank, pl.Int64), tid=pl.lit(tid, pl.Int64))


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
    mine = thread_samples(threads, who)
    if mine.height < 2:
        return pl.DataFrame(schema=CPU_WAIT_SCHEMA), [
            f"rank {rank}: no scheduler samples of its launching thread {who[1]}"
        ]
    sm = Samples(mine, cgroup)
    notes = []
    if outside := sm.outside(windows.start, windows.end):
        notes.append(
            f"rank {rank}: {outside} step windows reach outside the sampled time (counted as no change there)"
        )
    return _step_rows(rank, who[1], classified, windows, sm), notes


def _holding(starts: np.ndarray, ends: np.ndarray, names: list[str], t: np.ndarray) -> pl.Series:
    """The name of the range (sorted by start, disjoint per name) holding each time ``t`` (null
    where none does), vectorised."""
    none = pl.repeat(None, t.size, dtype=pl.String, eager=True)
    if starts.size == 0:
        return none
    j = np.searchsorted(starts, t, side="right") - 1
    i = np.maximum(j, 0)
    ok = (j >= 0) & (t < ends[i])
    return pl.Series(names, dtype=pl.String).gather(i).zip_with(pl.Series(ok), none)


def host_idle(
    rank: int, tid: int, classified: pl.DataFrame, ops: pl.DataFrame, windows: StepWindows,
    phases: pl.DataFrame, sm: Samples,
) -> pl.DataFrame:  # fmt: skip
    """The GPU idle intervals blamed on the host (CPU_WAIT_IDLE_SCHEMA; module docstring).
    ``ops``: the rank's ``stream_ops``."""
    if ops.height == 0:
        return pl.DataFrame(schema=CPU_WAIT_IDLE_SCHEMA)
    gaps = gpu_idle_intervals(classified, int(ops["start_ns"].min()), int(ops["end_ns"].max()))
    nxt = (
        ops.sort("call_start_ns", nulls_last=True)
        .group_by("start_ns", maintain_order=True)
        .agg(pl.col("call_start_ns").first(), pl.col("call_name").first())
    )
    g = pl.DataFrame({"start_ns": gaps[0], "end_ns": gaps[1]} if gaps else {"start_ns": [], "end_ns": []},
                     schema={"start_ns": pl.Int64, "end_ns": pl.Int64})  # fmt: skip
    g = g.join(nxt.rename({"start_ns": "end_ns"}), on="end_ns", how="inner").filter(
        pl.col("call_start_ns") > pl.col("start_ns")
    )
    if g.height == 0:
        return pl.DataFrame(schema=CPU_WAIT_IDLE_SCHEMA)
    g = g.sort("start_ns")
    a, b = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
    ph = phases.sort("start_ns")
    cols: dict[str, object] = {
        "step": pl.Series(windows.step_of(a), dtype=pl.Int64),
        "phase": pl.Series(
            _holding(ph["start_ns"].to_numpy(), ph["end_ns"].to_numpy(), ph["phase"].to_list(), a), dtype=pl.String
        ),
        "start_ns": a, "end_ns": b, "dur_ns": b - a,
        "late_ns": np.minimum(g["call_start_ns"].to_numpy() - a, b - a),
        "call_name": g["call_name"], **sm.state(a, b),
    }  # fmt: skip
    return _frame(cols, CPU_WAIT_IDLE_SCHEMA).with_columns(
        rank=pl.lit(rank, pl.Int64), tid=pl.lit(tid, pl.Int64)
    )


def phase_rows(
    rank: int, phases: pl.DataFrame, steps: pl.DataFrame, idle: pl.DataFrame, sm: Samples
) -> pl.DataFrame:
    """Per (step, phase) and per phase (step null): CPU_WAIT_PHASE_SCHEMA (module docstring)."""
    if phases.height == 0:
        return pl.DataFrame(schema=CPU_WAIT_PHASE_SCHEMA)
    s, e = phases["start_ns"].to_numpy(), phases["end_ns"].to_numpy()
    k = launch_step_index(steps, s)
    step = np.where(k >= 0, steps["step"].to_numpy()[np.maximum(k, 0)] if steps.height else 0, -1)
    st = sm.state(s, e)
    per = phases.select("phase").with_columns(
        step=pl.Series(step, dtype=pl.Int64), cpu_ns=pl.Series(e - s), run_ns=pl.Series(st["run_ns"]),
        wait_ns=pl.Series(st["wait_ns"]), host_idle_ns=pl.lit(0, pl.Int64), host_idle_wait_ns=pl.lit(0, pl.Int64),
        n=pl.lit(1, pl.Int64),
    )  # fmt: skip
    hid = idle.filter(pl.col("phase").is_not_null()).select(
        "phase", pl.col("step").fill_null(-1), host_idle_ns="dur_ns", host_idle_wait_ns="wait_ns",
        cpu_ns=pl.lit(0, pl.Int64), run_ns=pl.lit(0, pl.Int64), wait_ns=pl.lit(0, pl.Int64), n=pl.lit(0, pl.Int64),
    )  # fmt: skip
    both = pl.concat([per, hid.select(per.columns)])
    sums = [
        pl.col(c).sum() for c in ("n", "cpu_ns", "run_ns", "wait_ns", "host_idle_ns", "host_idle_wait_ns")
    ]
    by_step = both.filter(pl.col("step") >= 0).group_by("step", "phase").agg(sums)
    whole = both.group_by("phase").agg(sums).with_columns(step=pl.lit(None, pl.Int64))
    out = pl.concat([by_step, whole.select(by_step.columns)]).with_columns(
        other_ns=(pl.col("cpu_ns") - pl.col("run_ns") - pl.col("wait_ns")).clip(0),
        wait_pct=pl.when(pl.col("cpu_ns") > 0).then(100.0 * pl.col("wait_ns") / pl.col("cpu_ns")),
        rank=pl.lit(rank, pl.Int64),
    )
    return _conform(out.sort(pl.col("step").is_null(), "step", "phase"), CPU_WAIT_PHASE_SCHEMA)


def rank_cpu_wait(
    rank: int, trace: Trace, classified: pl.DataFrame, threads: pl.DataFrame, cgroup: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[str]]:
    """One rank's per-step rows, host-blamed idle intervals, per-phase rows and notes."""
    ctx = RankContext(trace, classified, classified, rank)  # step windows cut once, here
    windows = ctx.windows
    who = launching_thread(classified)
    empty = (pl.DataFrame(schema=CPU_WAIT_SCHEMA), pl.DataFrame(schema=CPU_WAIT_IDLE_SCHEMA),
             pl.DataFrame(schema=CPU_WAIT_PHASE_SCHEMA))  # fmt: skip
    mine = thread_samples(threads, who) if who is not None else threads.clear()
    if who is None or mine.height < 2:
        return *empty, [
            f"rank {rank}: no scheduler samples of its launching thread" + (f" {who[1]}" if who else "")
        ]
    sm = Samples(mine, cgroup)
    steps, notes = (_step_rows(rank, who[1], classified, windows, sm), []) if windows.n else (empty[0], [])
    if windows.n and (outside := sm.outside(windows.start, windows.end)):
        notes.append(
            f"rank {rank}: {outside} step windows reach outside the sampled time (counted as no change there)"
        )
    phases = phase_ranges(trace.nodes)
    idle = host_idle(rank, who[1], classified, stream_ops(ctx)[0],
                     windows, phases, sm)  # fmt: skip
    return (
        steps,
        idle,
        phase_rows(rank, phases, trace.steps(), idle, sm),
        notes + _short_note(rank, sm, phases, idle),
    )


def _short_note(rank: int, sm: Samples, phases: pl.DataFrame, idle: pl.DataFrame) -> list[str]:
    """How many phase ranges and idle intervals are shorter than the sampling period."""
    p = sm.period()
    n_ph = int(((phases["end_ns"] - phases["start_ns"]) < p).sum()) if phases.height else 0
    n_id = int((idle["dur_ns"] < p).sum()) if idle.height else 0
    if not (n_ph or n_id):
        return []
    return [
        f"rank {rank}: {n_ph} of {phases.height} phase ranges and {n_id} of {idle.height} host-blamed idle "
        f"intervals are shorter than the sampling period ({p / 1e6:.3g} ms): their run / wait split is "
        "interpolated between samples, an estimate"
    ]


def untraced_note(threads: pl.DataFrame, nodes: list[pl.DataFrame]) -> list[str]:
    """A note counting the samples of threads that appear in no trace (not used: threads without
    events, or ids that match nothing), empty when there are none."""
    cols = [n.filter(~pl.col("on_gpu").fill_null(False)).select(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64))
            for n in nodes if {"pid", "tid", "on_gpu"} <= set(n.columns)]  # fmt: skip
    traced = pl.concat(cols).unique() if cols else pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64})
    other = threads.join(traced, on=["pid", "tid"], how="anti")
    if other.height == 0:
        return []
    k = other.select(pl.struct("pid", "tid").n_unique()).item()
    return [
        f"CPU scheduler telemetry: {other.height} samples of {k} thread{'s' if k != 1 else ''} that appear "
        "in no trace not used"
    ]


def cgroup_quota(cgroup: pl.DataFrame | None) -> dict[str, float] | None:
    """The cgroup's cpu.max as last sampled: quota_us, period_us, cores; None without a quota."""
    if cgroup is None or "quota_us" not in cgroup.columns:
        return None
    q = cgroup.filter(pl.col("quota_us").is_not_null() & (pl.col("period_us") > 0)).sort("time_ns")
    if q.height == 0:
        return None
    quota, period = int(q["quota_us"][-1]), int(q["period_us"][-1])
    return {"quota_us": quota, "period_us": period, "cores": quota / period}


def run_cpu_wait(
    traces: dict[int, Trace],
    classified: dict[int, pl.DataFrame],
    samples: tuple[pl.DataFrame, pl.DataFrame, list[str]],
) -> CpuWaitResult | None:
    """Every rank's figures (``CpuWaitResult``) from the run's CPU scheduler samples
    (``Run.cpu_sched``: threads, cgroup, the reader's notes); None without thread samples."""
    threads, cgroup, read_notes = samples
    if threads.height == 0:
        return None
    parts, notes = [], [*read_notes, *untraced_note(threads, [traces[r].nodes for r in sorted(traces)])]
    for rank in sorted(classified):
        if rank in traces:
            *frames, n = rank_cpu_wait(rank, traces[rank], classified[rank], threads, cgroup)
            parts.append(frames)
            notes.extend(n)
    if not parts:
        return None
    cat = [pl.concat([p[i] for p in parts]) for i in range(3)]
    if (cgroup.height if cgroup is not None else 0) < 2:
        notes.append("no cgroup samples: no throttling figures")
    return CpuWaitResult(*cat, quota=cgroup_quota(cgroup), notes=notes)


def thread_states(nodes: pl.DataFrame, threads: pl.DataFrame) -> pl.DataFrame:
    """Slices (tid, start_ns, end_ns, state: running | runnable | sleeping) of the launching thread
    of one rank's nodes, from its samples: per sampling period, its run and wait increases (at
    most the period) then the rest, in that order (module docstring). Empty without samples."""
    schema = {"tid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "state": pl.String}
    who = launching_thread(nodes)
    mine = thread_samples(threads, who) if who is not None else threads.clear()
    if who is None or mine.height < 2:
        return pl.DataFrame(schema=schema)
    t = mine["time_ns"].to_numpy()
    d = np.diff(t)
    run = np.clip(np.diff(mine["run_ns"].to_numpy()), 0, d)
    wait = np.clip(np.diff(mine["wait_ns"].to_numpy()), 0, d - run)
    a = t[:-1]
    cuts = [
        (a, a + run, "running"),
        (a + run, a + run + wait, "runnable"),
        (a + run + wait, t[1:], "sleeping"),
    ]
    out = pl.concat(
        [
            pl.DataFrame(
                {"start_ns": s, "end_ns": e}, schema={"start_ns": pl.Int64, "end_ns": pl.Int64}
            ).with_columns(state=pl.lit(name))
            for s, e, name in cuts
        ]  # fmt: skip
    )
    out = out.filter(pl.col("end_ns") > pl.col("start_ns")).sort("start_ns")
    return out.with_columns(tid=pl.lit(who[1], pl.Int64)).select(list(schema))


def merge(m: Merge) -> CpuWaitResult | None:
    """The registry's merge of ``cpu_wait`` (``analysis/registry.py``): every rank's figures from
    the run's CPU scheduler samples, read with the ranks' kept timelines (the local path); None
    without samples (collect --cpu-hz), and then nothing in ``skipped`` (the result is optional)."""
    if m.cpu_sched is None:
        return None
    traces = {p.rank: p.trace for p in m.parts if p.trace is not None}
    classified = {p.rank: p.classified for p in m.parts if p.classified is not None}
    return run_cpu_wait(traces, classified, m.cpu_sched)
