"""CPU scheduler telemetry cost (issue 24, "Speed and memory"): step time, run size, join cost.

    python benchmarks/bench_cpu_telemetry.py [--pairs 3] [--steps 30] [--rows 100000] [--json out.json]

1. Overhead: ``examples/train_tiny.py`` on 2 CPU ranks (gloo) under ``charllm-trace collect
   --steps 10-14``, with CPU telemetry at the default rate (no ``--cpu-hz``) and with
   ``--cpu-hz 0``, alternated (``--pairs`` pairs, the order flipped every pair). Step times are the
   example's own timer (rank 0), steps 5 and later; the sampler runs for the whole command, so
   every step is exposed to it. Reports the median step time of each arm, their ratio, and the
   run directories' sizes (all files) and their ratio.
2. Join cost: each fixture (``tests/fixtures/traces/h200-1rank-nccl``, whose GPU idle intervals
   blamed on the host are joined too, and ``cpu-2rank-gloo``) copied to a temporary folder, once
   as it is and once with a SYNTHETIC ``cpusched-bench.csv`` (the collector's format,
   docs/collect.md) of at least ``--rows`` rows: every traced (pid, tid) sampled at a uniform
   high rate over the traced window (50 ms either side), cumulative counters that grow by known
   run / wait fractions. ``analyze --no-cache --format json`` on each, alternated (``--rounds``),
   CPU time (user + system of the child) per run; median ratio with / without.
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
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURES = [ROOT / "tests" / "fixtures" / "traces" / n for n in ("h200-1rank-nccl", "cpu-2rank-gloo")]
CLI = [sys.executable, "-m", "charllm_trace.cli.app"]
COLUMNS = "time_ns,pid,tid,comm,state,utime_ticks,stime_ticks,run_ns,wait_ns,slices,vol_cs,invol_cs"


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def collect_once(steps: int, cpu_hz: float | None) -> tuple[list[float], int, int]:
    """(rank 0's step times, run directory bytes, CPU-telemetry bytes) of one collected run."""
    with tempfile.TemporaryDirectory() as tmp:
        times_p, run = Path(tmp) / "times.json", Path(tmp) / "run"
        hz = [] if cpu_hz is None else ["--cpu-hz", str(cpu_hz)]
        train = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 str(ROOT / "examples" / "train_tiny.py"), "--steps", str(steps), "--step-times", str(times_p)]  # fmt: skip
        cmd = [*CLI, "collect", "--steps", "10-14", *hz, "-o", str(run), "--", *train]
        for attempt in range(3):  # a rendezvous on a busy shared machine can fail; say so, retry
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if p.returncode == 0:
                break
            print(
                f"run failed (exit {p.returncode}, attempt {attempt + 1}):", p.stderr[-2000:], file=sys.stderr
            )
            shutil.rmtree(run, ignore_errors=True)
        else:
            raise RuntimeError("the example failed three times")
        cpu = sum(f.stat().st_size for f in run.glob("cpusched*"))
        return json.loads(times_p.read_text()), dir_bytes(run), cpu


def bench_overhead(pairs: int, steps: int, on_hz: float | None = None) -> dict:
    on_t: list[float] = []
    off_t: list[float] = []
    on_b, off_b, cpu_b, per_pair = [], [], [], []
    for k in range(pairs):
        meds = {}
        for arm in ("on", "off") if k % 2 == 0 else ("off", "on"):
            times, size, cpu = collect_once(steps, on_hz if arm == "on" else 0.0)
            keep = times[5:]
            meds[arm] = statistics.median(keep)
            if arm == "on":
                on_t += keep
                on_b.append(size)
                cpu_b.append(cpu)
            else:
                off_t += keep
                off_b.append(size)
        per_pair.append(meds["on"] / meds["off"])
    med = statistics.median
    return {
        "pairs": pairs,
        "cpu_hz_on_arm": "default" if on_hz is None else on_hz,
        "steps_per_run": steps,
        "step_ms_telemetry_on": 1e3 * med(on_t),
        "step_ms_cpu_hz_0": 1e3 * med(off_t),
        "step_time_ratio": med(on_t) / med(off_t),
        "step_time_ratio_per_pair": per_pair,
        "run_dir_bytes_telemetry_on": med(on_b),
        "run_dir_bytes_cpu_hz_0": med(off_b),
        "cpusched_files_bytes": med(cpu_b),
        "run_dir_size_ratio": med(on_b) / med(off_b),
    }


def traced_threads(run_dir: Path) -> tuple[list[tuple[int, int]], int, int]:
    """The CPU (pid, tid) pairs of the run's traces and their time span (epoch ns)."""
    from charllm_trace.inputs.loader import load

    run = load(str(run_dir))
    pairs: set[tuple[int, int]] = set()
    lo, hi = None, None
    for t in run.traces.values():
        n = t.nodes.filter(~t.nodes["on_gpu"].fill_null(False)) if "on_gpu" in t.nodes.columns else t.nodes
        n = n.filter(n["tid"].is_not_null() & (n["pid"] >= 0))
        pairs |= {(int(p), int(q)) for p, q in n.select("pid", "tid").unique().iter_rows()}
        s, e = int(n["start_ns"].min()), int((n["start_ns"] + n["dur_ns"]).max())
        lo, hi = (s, e) if lo is None else (min(lo, s), max(hi, e))
    return sorted(pairs), lo, hi


def write_samples(path: Path, pairs: list[tuple[int, int]], lo: int, hi: int, rows: int) -> int:
    """SYNTHETIC thread samples: each pair sampled every ``period`` ns over [lo - 50 ms, hi + 50 ms];
    per period the thread runs 60 % and waits 15 % (cumulative counters). Returns the row count."""
    lo, hi = lo - 50_000_000, hi + 50_000_000
    per = -(-rows // len(pairs))
    period = (hi - lo) // per
    t = lo + period * np.arange(per, dtype=np.int64)
    k = np.arange(per, dtype=np.int64)
    run_ns, wait_ns = k * (period * 60 // 100), k * (period * 15 // 100)
    ticks = (run_ns // 10_000_000).astype(np.int64)
    with open(path, "w") as f:
        f.write(COLUMNS + "\n")
        for pid, tid in pairs:
            cols = [t, np.full(per, pid), np.full(per, tid), ticks, ticks // 4, run_ns, wait_ns, k, k, k // 3]
            body = np.char.mod("%d", np.stack(cols, axis=1))
            for r in body:  # benchmark input only (not a hot path of the tool)
                f.write(f"{r[0]},{r[1]},{r[2]},bench,R,{','.join(r[3:])}\n")
    return per * len(pairs)


def analyze_cpu_s(run_dir: Path) -> tuple[float, dict]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([*CLI, "analyze", "--no-cache", "--format", "json", str(run_dir)], capture_output=True,
                       text=True, cwd=ROOT)  # fmt: skip
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"analyze failed (exit {p.returncode}): {p.stderr[-2000:]}")
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), json.loads(p.stdout)


def bench_join(fixture: Path, rows: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        plain, tele = Path(tmp) / "plain", Path(tmp) / "tele"
        shutil.copytree(fixture, plain)
        shutil.copytree(fixture, tele)
        pairs, lo, hi = traced_threads(plain)
        n = write_samples(tele / "cpusched-bench.csv", pairs, lo, hi, rows)
        with_s, without_s = [], []
        out = None
        for k in range(rounds):
            for arm in ("with", "without") if k % 2 == 0 else ("without", "with"):
                s, doc = analyze_cpu_s(tele if arm == "with" else plain)
                (with_s if arm == "with" else without_s).append(s)
                out = doc if arm == "with" else out
        med = statistics.median
        frames = out["frames"]
    return {
        "fixture": fixture.name,
        "rows": n,
        "threads": len(pairs),
        "rounds": rounds,
        "analyze_cpu_s_with_telemetry": med(with_s),
        "analyze_cpu_s_without": med(without_s),
        "cpu_time_ratio": med(with_s) / med(without_s),
        "join_share_of_analyze": 1 - med(without_s) / med(with_s),
        # the known answer: the synthetic thread waits 15 % of every sampling period
        "step_wait_pct_median": statistics.median(r["wait_pct"] for r in frames["cpu_wait"]),
        "steps_joined": len(frames["cpu_wait"]),
        "host_blamed_idle_intervals_joined": len(frames["cpu_wait_idle"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-join", action="store_true")
    ap.add_argument("--on-hz", type=float, default=None, help="telemetry arm's --cpu-hz (default: collect's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out: dict = {"machine": f"{os.cpu_count()} CPU cores, no GPU", "loadavg_before": os.getloadavg()}
    if not args.skip_join:
        out["join"] = [bench_join(f, args.rows, args.rounds) for f in FIXTURES]
    if not args.skip_overhead:
        out["overhead"] = bench_overhead(args.pairs, args.steps, args.on_hz)
    out["loadavg_after"] = os.getloadavg()  # other work on the shared machine
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
