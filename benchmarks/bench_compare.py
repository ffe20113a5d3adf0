"""``charllm-trace compare`` on 20 runs: the first time (every run converted and analysed) and again
(every run's results read from the results cache), as whole processes.

The 20 runs are variants of the collected 2-rank gloo fixture (``tests/fixtures/traces/
cpu-2rank-gloo``), written as ET directories: run i has every time stretched by 1 + i/20, a
100 Hz power/temperature/clock stream scaled by 1 + i/40, and a workload (global batch 8·(1 + i%4),
sequence length 64) and a dp=2 layout in its manifest. ``--source DIR`` uses those 20 copies of
another input instead (any ``analyze`` input, e.g. a shared Kineto profile), each in a directory
of its own so the caches treat them as different paths of the same content.

Each round uses a fresh empty cache directory (``CHARLLM_TRACE_CACHE_DIR``):

  first      ``compare R1 .. R20 --json``: converts and analyses every run, stores the results;
  second     the same command again: 20 results-cache hits;
  table      ``compare R1 .. R20`` (the terminal tables), all hits.

The JSON of first and second is compared (the benchmark stops if they differ).

Usage::

    python benchmarks/bench_compare.py [--runs 20] [--rounds 3] [--source PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "traces" / "cpu-2rank-gloo"


def _variants(n: int, out: Path) -> list[Path]:
    import numpy as np
    import polars as pl

    from charllm_trace.core.model import Run
    from charllm_trace.et.writer import write_run
    from charllm_trace.inputs.loader import load

    base = load(FIXTURE, cache=False)
    paths = []
    for i in range(n):
        f, pw = 1 + i / 20, 1 + i / 40
        traces = {}
        for r, t in base.traces.items():
            s0 = int(t.nodes["start_ns"].min())
            nodes = t.nodes.with_columns(
                (s0 + (pl.col("start_ns") - s0) * f).round().cast(pl.Int64).alias("start_ns"),
                (pl.col("dur_ns") * f).round().cast(pl.Int64).alias("dur_ns"),
            )
            s1 = int((nodes["start_ns"] + nodes["dur_ns"]).max())
            tt = np.arange(s0 - 5_000_000, s1 + 10_000_000, 10_000_000, dtype=np.int64)
            k = np.arange(tt.size)
            cols = {
                "time_ns": tt,
                "device": np.zeros(tt.size, np.int64),
                "power_w": pw * (250 + 100 * np.sin(k / 3.0)),
                "temp_c": 60 + k / 7.0,
                "sm_clock_mhz": 1400 - 10.0 * (k % 5),
                "power_limit_w": np.full(tt.size, 300.0),
                "throttle_reasons": np.where(k % 4 == 1, 4, 0),
            }
            tel = pl.DataFrame(cols).select(
                [
                    pl.col(c).cast(d) if c in cols else pl.lit(None, d).alias(c)
                    for c, d in t.telemetry.schema.items()
                ]
            )
            traces[r] = dataclasses.replace(t, nodes=nodes, telemetry=tel)
        manifest = {
            **base.manifest,
            "workload": {"model": "tiny", "global_batch": 8 * (1 + i % 4), "seq_len": 64},
            "parallel": {"dp": 2},
        }
        p = out / f"run{i:02d}"
        write_run(Run(traces=traces, manifest=manifest), p, overwrite=True)
        paths.append(p)
    return paths


def _copies(src: Path, n: int, out: Path) -> list[Path]:
    paths = []
    for i in range(n):
        d = out / f"run{i:02d}"
        d.mkdir(parents=True, exist_ok=True)
        target = d / src.name
        if not target.exists():
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, target)
        paths.append(target)
    return paths


def _run(cmd: list[str], env: dict[str, str]) -> tuple[str, bytes]:
    """'wall s (CPU s)' of ``cmd`` (CPU: user + system of the process, from getrusage), and its stdout."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd[:4])} ...\n{p.stderr.decode()[-2000:]}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return f"{wall:.2f} s (CPU {cpu:.2f} s)", p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--source", type=Path, default=None, help="copy this input instead of the fixture variants"
    )
    ap.add_argument("--keep", type=Path, default=None, help="build the runs here and keep them")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="bench-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    runs = _copies(a.source, a.runs, work) if a.source else _variants(a.runs, work)
    cli = [sys.executable, "-m", "charllm_trace.cli.app", "compare", *map(str, runs)]
    print(f"{len(runs)} runs under {work}; load average {os.getloadavg()[0]:.1f}")
    for k in range(a.rounds):
        cache = Path(tempfile.mkdtemp(prefix="bench-compare-cache-"))
        env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
        env.pop("CHARLLM_TRACE_NO_CACHE", None)
        load = os.getloadavg()[0]
        first, out1 = _run([*cli, "--json"], env)
        second, out2 = _run([*cli, "--json"], env)
        table, _ = _run(cli, env)
        if out1 != out2:
            sys.exit("first and second compare differ")
        print(f"round {k + 1}: first {first}, second {second}, table {table} (load {load:.1f})")
        shutil.rmtree(cache, ignore_errors=True)
    if a.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
