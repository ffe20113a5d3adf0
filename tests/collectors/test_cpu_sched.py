"""CPU scheduler telemetry (issue 24): recorded by collect, read back with hostile values refused,
and joined with the steps (analysis/cpu_wait.py) against known answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.conftest import HAVE_TORCH, ROOT
from tests.helpers.analysis_helpers import T0, cpu, kernel, make_trace


def _samples(tid: int, pid: int, times: list[int], run: list[int], wait: list[int]) -> pl.DataFrame:
    from charllm_trace.converters.cpu_sched import THREAD_SCHEMA

    n = len(times)
    return pl.DataFrame(
        {"time_ns": [T0 + t for t in times], "pid": [pid] * n, "tid": [tid] * n, "comm": ["python"] * n,
         "state": ["R"] * n, "utime_ticks": [0] * n, "stime_ticks": [0] * n, "run_ns": run, "wait_ns": wait,
         "slices": [0] * n, "vol_cs": [0] * n, "invol_cs": [0] * n},
        schema=THREAD_SCHEMA,
    )  # fmt: skip


def test_cpu_wait_per_step_and_in_gpu_idle_time() -> None:
    """Two steps of 1,000 µs on the GPU; kernels busy 0-200 and 600-1000 µs of step 0 and 1000-1400
    of step 1 (GPU idle 400 µs in each step). The launching thread (tid 11) waits at 0.5 ns/ns from
    0 to 500 µs and runs at 1 ns/ns after: its counters, sampled every 100 µs, give the answer."""
    from charllm_trace.analysis.cpu_wait import cpu_wait
    from charllm_trace.analysis.step_windows import StepWindows
    from charllm_trace.core.classify import classify

    rows = [
        cpu(1, "cudaLaunchKernel", 0, 5, kind="runtime", tid=11, pid=5, correlation=1),
        cpu(2, "cudaLaunchKernel", 10, 5, kind="runtime", tid=11, pid=5, correlation=2),
        cpu(3, "cudaLaunchKernel", 20, 5, kind="runtime", tid=11, pid=5, correlation=3),
        cpu(4, "aten::add", 0, 5, tid=12, pid=5),
        kernel(5, "k0", 0, 200_000, correlation=1),
        kernel(6, "k1", 600_000, 400_000, correlation=2),
        kernel(7, "k2", 1_000_000, 400_000, correlation=3),
    ]
    c = classify(make_trace(rows).nodes)
    win = StepWindows(
        np.array([0, 1]), np.array([T0, T0 + 1_000_000]), np.array([T0 + 1_000_000, T0 + 2_000_000]), "gpu"
    )
    times = list(range(0, 2_000_001, 100_000))
    wait = [min(t, 500_000) // 2 for t in times]
    run = [max(t - 500_000, 0) for t in times]
    th = _samples(11, 5, times, run, wait).vstack(_samples(12, 5, times, times, [0] * len(times)))
    df, notes = cpu_wait(0, c, win, th)
    assert notes == []
    got = df.select(
        "step", "tid", "window_ns", "run_ns", "wait_ns", "other_ns", "gpu_idle_ns", "idle_wait_ns"
    ).rows()
    # step 0: wait 250 µs (all before 500 µs), run 500 µs; GPU idle 200-600 µs, the wait in it 200-500 µs: 150 µs
    # step 1: run 1,000 µs, no wait; GPU idle 1400-2000 µs
    assert got == [(0, 11, 1_000_000, 500_000, 250_000, 250_000, 400_000, 150_000),
                   (1, 11, 1_000_000, 1_000_000, 0, 0, 600_000, 0)]  # fmt: skip


def test_hostile_samples_are_dropped_with_a_note(tmp_path: Path) -> None:
    from charllm_trace.converters.cpu_sched import read_cpu_sched

    head = "time_ns,pid,tid,comm,state,utime_ticks,stime_ticks,run_ns,wait_ns,slices,vol_cs,invol_cs\n"
    body = [
        "100,1,1,python,R,1,0,10,5,1,0,1",
        "200,1,1,python,R,2,0,20,6,2,0,1",
        "300,1,1,python,R,3,0,15,7,3,0,1",  # run_ns goes backwards
        "400,1,1,python,R,4,0,-1,8,4,0,1",  # negative
        "500,1,1,python,R,5,0,40,9,5,0,1",
        "600,1,1,pyth",  # cut short by a kill
    ]
    (tmp_path / "cpusched-h.csv").write_text(head + "\n".join(body) + "\n")
    th, cg, notes = read_cpu_sched(tmp_path)
    assert th["time_ns"].to_list() == [100, 200, 500] and cg.height == 0
    assert notes == [
        "CPU scheduler telemetry: 2 thread samples ignored (negative values or counters going backwards)"
    ]


def test_cpu_wait_refuses_a_run_without_telemetry(tmp_path: Path) -> None:
    from tests.conftest import invoke

    r = invoke("cpu-wait", str(tmp_path))
    assert r.exit_code == 2 and "no CPU scheduler telemetry" in r.output and r.output.strip().count("\n") == 0



def test_cpu_wait_refuses_a_file_that_is_no_run(tmp_path: Path) -> None:
    from tests.conftest import invoke

    f = tmp_path / "notes.txt"
    f.write_text("not a run\n")
    r = invoke("cpu-wait", str(f))
    assert r.exit_code == 2 and "not a run directory" in r.output and r.output.strip().count("\n") == 0


@pytest.mark.parametrize("hz", ["-1", "nan", "inf", "1e9"])
def test_collect_refuses_a_bad_cpu_rate_before_running(hz: str, tmp_path: Path) -> None:
    from tests.conftest import invoke

    r = invoke("collect", "--cpu-hz", hz, "-o", str(tmp_path / "run"), "--", "true")
    assert r.exit_code == 2 and r.output.strip().count("\n") == 0, r.output
    assert "--cpu-hz" in r.output or "cpu-hz" in r.output, r.output
    assert not (tmp_path / "run").exists()

@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH or shutil.which("taskset") is None, reason="needs torch and taskset")
def test_two_busy_ranks_pinned_to_one_core(spawn, tmp_path: Path) -> None:
    """Real contention: two ranks of the CPU-bound inference example pinned to one core. One core
    runs at most one thread at a time, so their threads' run time adds up to at most the wall time,
    and each compute-bound launching thread is runnable (running or waiting) nearly all the step:
    the analysis must find them waiting for the core a large part of it."""
    from charllm_trace.analysis.cpu_wait import cpu_wait
    from charllm_trace.analysis.marker_steps import with_marker_steps
    from charllm_trace.analysis.step_windows import step_windows
    from charllm_trace.converters.cpu_sched import read_cpu_sched
    from charllm_trace.core.classify import classify
    from charllm_trace.inputs.loader import load

    out = tmp_path / "run"
    cmd = ["taskset", "-c", "0", sys.executable, "-m", "charllm_trace.cli.app", "collect", "--cpu-hz", "100",
           "--telemetry-hz", "0", "--step-marker", "batch", "--steps", "1-2", "-o", str(out), "--",
           sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "examples" / "infer_tiny.py"), "--requests", "8", "--batch", "2", "--new-tokens", "16"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    th, _, _ = read_cpu_sched(out)
    run = load(str(out), cache=False)
    pids = {int(tr.nodes.filter(pl.col("kind") == "cpu_op")["pid"].mode()[0]) for tr in run}
    mine = th.filter(pl.col("pid").is_in(list(pids)))
    t0, t1 = (
        mine.group_by("pid").agg(pl.col("time_ns").min()).max()["time_ns"][0],
        mine.group_by("pid").agg(pl.col("time_ns").max()).min()["time_ns"][0],
    )
    both = (
        mine.filter(pl.col("time_ns").is_between(t0, t1))
        .group_by("tid")
        .agg(d=pl.col("run_ns").max() - pl.col("run_ns").min())
    )
    assert t1 - t0 > 100_000_000 and both["d"].sum() <= 1.05 * (t1 - t0)  # one core's worth at most
    for rank, tr in run.traces.items():
        tr, _ = with_marker_steps(tr, "batch")
        c = classify(tr.nodes)
        df, _ = cpu_wait(rank, c, step_windows(tr, c), th)
        assert df.height == 2
        assert ((df["run_ns"] + df["wait_ns"]) >= 0.8 * df["window_ns"]).all(), df  # compute bound
        assert df["wait_pct"].mean() >= 25, df
