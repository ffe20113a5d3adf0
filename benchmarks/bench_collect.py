"""Collector overhead (issue 4): telemetry sampler CPU use, and the cost of tracing a step.

    python benchmarks/bench_collect.py [--window 10] [--steps 40] [--json out.json]

1. Sampler CPU use at 100 Hz: a real sampler process (``python -m
   charllm_trace.collectors.telemetry.sampler``) reading the replay backend (a SYNTHETIC stream
   written here, 1 and 8 devices), its user+system CPU time taken from ``/proc/<pid>/stat`` over a
   window after a warm-up. This measures our loop (rate control, formatting, writing, flushing); on
   a GPU node each NVML/AMD SMI call adds its own cost, which this machine (no GPU) cannot measure.
2. The real "no power source" path: the sampler started with ``--source auto``; its total CPU time
   and wall time until it exits (it has nothing to sample).
3. Traced vs untraced step: ``examples/train_tiny.py`` on 2 CPU ranks (gloo), once plainly under
   torchrun and once under ``charllm-trace collect --steps 10-14``, with the example's own step
   timer (rank 0). Reports median untraced step time of both runs (steps 5-9 and 16+; step 15
   is left out as the first after the window), traced steps 10-13, and step 14, whose
   optimizer.step() also stops the profiler and writes the files.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def write_stream(path: Path, devices: int, seconds: float, update_ms: float = 20.0) -> None:
    up = int(update_ms * 1e6)
    rows = [
        "t_ns,device,power_w,energy_j,temp_c,mem_temp_c,sm_clock_mhz,mem_clock_mhz,util_pct,power_limit_w,throttle_reasons"
    ]
    for d in range(devices):
        for k in range(int(seconds * 1e9 / up) + 1):
            rows.append(
                f"{k * up},{d},{300 + (k * 7 + d) % 400}.5,{k * 6.25},{60 + k % 5},{70 + k % 3},1980,2619,{k % 100},700,{k % 8}"
            )
    path.write_text("\n".join(rows) + "\n")


def bench_sampler(devices: int, window: float, hz: float = 100.0) -> dict:
    from charllm_trace.collectors.telemetry.sampler import start_sampler_process, stop_sampler_process

    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "stream.csv"
        write_stream(stream, devices, window + 30)
        run = Path(tmp) / "run"
        proc = start_sampler_process(str(run), hz, f"replay:{stream}")
        time.sleep(2.0)  # warm-up: interpreter start, imports
        c0, t0 = cpu_seconds(proc.pid), time.perf_counter()
        time.sleep(window)
        c1, t1 = cpu_seconds(proc.pid), time.perf_counter()
        stop_sampler_process(proc)
        (meta_p,) = run.glob("telemetry-*.meta.json")
        meta = json.loads(meta_p.read_text())
        size = sum(p.stat().st_size for p in run.glob("telemetry-*.csv"))
        elapsed = (meta["end_ns"] - meta["start_ns"]) / 1e9
    return {
        "devices": devices,
        "requested_hz": hz,
        "cpu_pct_of_one_core": 100 * (c1 - c0) / (t1 - t0),
        "achieved_hz": meta["achieved_hz"],
        "missed_ticks": meta["missed_ticks"],
        "csv_bytes_per_s": size / elapsed,
    }


def bench_no_source() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "charllm_trace.collectors.telemetry.sampler",
                "--run-dir",
                tmp,
                "--source",
                "auto",
            ],
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        (meta_p,) = Path(tmp).glob("telemetry-*.meta.json")
        meta = json.loads(meta_p.read_text())
    return {
        "source": meta["source"],
        "no_source_reason": meta["no_source_reason"],
        "cpu_s_total": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
        "wall_s": wall,
    }


def run_example(steps: int, collect: bool) -> tuple[list[float], dict | None]:
    with tempfile.TemporaryDirectory() as tmp:
        times_p = Path(tmp) / "times.json"
        train = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(ROOT / "examples" / "train_tiny.py"),
            "--steps",
            str(steps),
            "--step-times",
            str(times_p),
        ]
        info = None
        if collect:
            run = Path(tmp) / "run"
            cmd = [
                sys.executable,
                "-m",
                "charllm_trace.cli.app",
                "collect",
                "--steps",
                "10-14",
                "-o",
                str(run),
                "--",
                *train,
            ]
        else:
            cmd = train
        for attempt in range(3):  # a rendezvous on a busy shared machine can fail; say so, retry
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode == 0:
                break
            tail = [ln for ln in p.stderr.splitlines() if "Warning" not in ln and ln.strip()][-25:]
            print(
                f"run failed (exit {p.returncode}, attempt {attempt + 1}):",
                *tail,
                sep="\n  ",
                file=sys.stderr,
            )
            shutil.rmtree(Path(tmp) / "run", ignore_errors=True)
        else:
            raise RuntimeError("the example failed three times")
        if collect:
            info = json.loads((Path(tmp) / "run" / "rank-0.info.json").read_text())
        return json.loads(times_p.read_text()), info


def bench_steps(steps: int, reps: int) -> dict:
    untraced_plain: list[float] = []
    untraced_coll: list[float] = []
    traced: list[float] = []
    stop_step: list[float] = []
    export: list[float] = []
    before: list[float] = []
    after: list[float] = []
    for _ in range(reps):
        plain, _ = run_example(steps, collect=False)
        coll, info = run_example(steps, collect=True)
        idx_untraced = [i for i in range(5, steps) if not 10 <= i <= 15]
        untraced_plain += [plain[i] for i in idx_untraced]
        untraced_coll += [coll[i] for i in idx_untraced]
        before += [coll[i] for i in range(5, 10)]
        after += [coll[i] for i in range(16, steps)]
        traced += [coll[i] for i in range(10, 14)]
        stop_step.append(coll[14])
        export.append(info["export_s"])
    med = statistics.median
    return {
        "steps_per_run": steps,
        "reps": reps,
        "untraced_step_ms_plain_torchrun": 1e3 * med(untraced_plain),
        "untraced_step_ms_under_collect": 1e3 * med(untraced_coll),
        "untraced_step_ms_under_collect_before_window": 1e3 * med(before),
        "untraced_step_ms_under_collect_after_window": 1e3 * med(after),
        "traced_step_ms": 1e3 * med(traced),
        "traced_over_untraced": med(traced) / med(untraced_coll),
        "last_traced_step_with_stop_and_export_ms": 1e3 * med(stop_step),
        "export_s": med(export),
    }


def bench_hook_idle(number: int = 20_000, repeat: int = 15) -> dict:
    """Cost of the step hook on an untraced step: the optimizer post-hook plus the step wrapper.

    Two SGD optimizers over one scalar, stepped alternately; only the second is the tracer's step
    clock (the first still runs the global hook, which returns at once for it). Fastest of
    ``repeat`` rounds of ``number`` steps each (the round least disturbed by other work).
    """
    import timeit

    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from charllm_trace.collectors.hook import StepTracer

    p = torch.nn.Parameter(torch.zeros(1))
    plain = torch.optim.SGD([p], lr=0.0)
    clock = torch.optim.SGD([p], lr=0.0)
    base, hooked, other = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        tracer = StepTracer(tmp, 10**12, 10**12)  # a window never reached: every step is untraced
        handle = register_optimizer_step_post_hook(tracer.optimizer_hook)
        clock.step()  # the first step makes it the clock and installs the wrapper
        handle.remove()
        for _ in range(repeat):  # interleaved rounds; the fastest of each kind is the least disturbed
            base.append(timeit.timeit(plain.step, number=number))
            handle = register_optimizer_step_post_hook(tracer.optimizer_hook)
            hooked.append(timeit.timeit(clock.step, number=number))
            other.append(timeit.timeit(plain.step, number=number))
            handle.remove()
        tracer.step_end_ns.clear()
        tracer.completed = 0
    base_t, hooked_t, other_t = min(base), min(hooked), min(other)
    us = 1e6 / number
    return {
        "sgd_step_us_no_hook": base_t * us,
        "sgd_step_us_step_clock": hooked_t * us,
        "sgd_step_us_other_optimizer": other_t * us,
        "hook_cost_us_per_step": (hooked_t - base_t) * us,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=10.0, help="seconds of sampler CPU measurement")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    out = {
        "machine": f"{os.cpu_count()} CPU cores, no GPU",
        "sampler_replay": [bench_sampler(1, args.window), bench_sampler(8, args.window)],
        "sampler_no_source": bench_no_source(),
        "hook_idle": bench_hook_idle(),
        "steps": bench_steps(args.steps, args.reps),
    }
    out["loadavg_1min_before_after"] = [load0, os.getloadavg()[0]]  # other work on the machine
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
