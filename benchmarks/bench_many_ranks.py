"""``analyze`` of many-rank runs on the local path (no Dask): the baseline a distributed engine
is compared to (issue 11). Runnable by hand, not in CI.

For each N (default 128, 512, 1,024) an N-rank run directory is generated from the real 8-rank
DLRM set (``benchmarks/make_many_ranks.py``; kept in ``--workdir`` for re-use), then each case
runs ``charllm-trace analyze RUN --no-cache --format json -o FILE`` in a fresh subprocess:

- ``all``: every rank;
- ``--ranks 0-7``: 8 ranks, chosen before any file is read whole;
- ``--sample 64``: 64 ranks evenly spaced (``limits.sample_ranks``).

Printed per case: wall time (measured by this parent), the driver's peak RSS (the child's own
``VmHWM``: the conversion workers, spawned processes, are not counted; their peak is printed as
``workers MiB``, from ``RUSAGE_CHILDREN``), ranks/s and MB/s of (compressed) input, and the
1-minute load average before the case (the machine is shared: compare with it in mind).

With ``--scheduler ADDRESS`` (e.g. ``local:2``: a ``LocalCluster`` of 2 process workers started
by the analysing process) every case runs through the Dask engine (docs/scale.md); "driver MiB"
is then the peak of the process that gathers and merges the ranks' parts and writes the JSON
(the scheduler of ``local:N`` runs in it too; its workers are not counted). ``--no-critical-path``
passes that option (with a scheduler the critical path runs on the workers: docs/scale.md).

    python benchmarks/bench_many_ranks.py                       # 128, 512, 1024 ranks
    python benchmarks/bench_many_ranks.py --ranks 128 --cases all,ranks
    python benchmarks/bench_many_ranks.py --scheduler local:2 --no-critical-path --cases all
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = r"""
import json, resource, sys
from charllm_trace.cli.app import main
code = 0
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit as e:
    code = e.code or 0
hwm = 0.0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1]) / 1024
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"rc": code, "driver_mib": hwm, "workers_mib": kids}), file=sys.stderr)
"""
CASES = {"all": [], "ranks": ["--ranks", "0-7"], "sample": ["--sample", "64"]}


def _dir_mb(d: Path) -> float:
    return sum(f.stat().st_size for f in d.iterdir() if f.is_file()) / 1e6


def generated(n: int, workdir: Path) -> tuple[Path, float | None]:
    """The N-rank run (made unless present) and the seconds it took to make (None: re-used)."""
    d = workdir / f"dlrm_{n}"
    if d.is_dir() and len(list(d.glob("kineto_rank*.json.gz"))) == n:
        return d, None
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(HERE / "make_many_ranks.py"), str(n), str(d)], check=True)
    return d, time.perf_counter() - t0


def run_case(run: Path, extra: list[str], out: Path) -> dict:
    """One ``analyze`` in a fresh process: wall time, its peak RSS, the ranks in its output."""
    load1 = os.getloadavg()[0]
    cmd = [sys.executable, "-c", CHILD, "analyze", str(run), "--no-cache", "--format", "json", "-o", str(out),
           "--force", *extra]  # fmt: skip
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    stats = json.loads(p.stderr.strip().splitlines()[-1])
    if stats["rc"] != 0:
        raise SystemExit(f"analyze failed: {p.stderr.strip()[-400:]}")
    ranks = len(json.loads(out.read_text())["ranks"])
    return {"wall_s": wall, "ranks": ranks, "load1": load1, **stats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="128,512,1024", help="run sizes (comma-separated)")
    ap.add_argument("--cases", default="all,ranks,sample", help=f"of {', '.join(CASES)}")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "charllm-many-ranks")
    ap.add_argument("--scheduler", default=None, metavar="ADDRESS", help="analyse through Dask (local:N)")
    ap.add_argument("--no-critical-path", action="store_true", help="pass --no-critical-path")
    a = ap.parse_args(argv)
    common = (["--scheduler", a.scheduler] if a.scheduler else []) + (
        ["--no-critical-path"] if a.no_critical_path else []
    )
    if common:
        print(f"# analyze options: {' '.join(common)}")
    a.workdir.mkdir(parents=True, exist_ok=True)
    print(f"{'N':>5} {'case':<12} {'ranks':>5} {'wall s':>8} {'driver MiB':>10} {'workers MiB':>11} "
          f"{'ranks/s':>8} {'MB/s':>6} {'load1':>6}")  # fmt: skip
    for n in (int(x) for x in a.ranks.split(",")):
        run, made = generated(n, a.workdir)
        mb = _dir_mb(run)
        if made is not None:
            print(f"# generated {n} ranks ({mb:.1f} MB gzip) in {made:.1f} s")
        for case in a.cases.split(","):
            r = run_case(run, [*CASES[case], *common], a.workdir / f"out_{n}_{case}.json")
            share = r["ranks"] / n
            label = case if case == "all" else " ".join(CASES[case])
            print(
                f"{n:>5} {label:<12} {r['ranks']:>5} {r['wall_s']:>8.1f} {r['driver_mib']:>10.0f} "
                f"{r['workers_mib']:>11.0f} {r['ranks'] / r['wall_s']:>8.1f} {mb * share / r['wall_s']:>6.2f} "
                f"{r['load1']:>6.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
