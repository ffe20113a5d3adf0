"""``convert`` against ``analyze`` of an N-rank run (issue 26 item 4): ranks/s and how many cores
each keeps busy. Runnable by hand, not in CI.

Each command runs in a fresh process (``python -c 'from charllm_trace.cli.app import main' ...``,
the package imported from the current directory's ``PYTHONPATH``): ``convert RUN -o DIR --force``
and ``analyze RUN --no-cache --no-critical-path --format json -o FILE``. Printed per command: wall
seconds measured by this parent, CPU seconds of the command and all its children (user + sys,
``RUSAGE_CHILDREN`` deltas: the conversion worker processes included), the command's own
process's CPU seconds and peak RSS (the driver: what is serial in it), cores busy = CPU / wall,
ranks/s, and the 1-minute load average before it (the machine is shared: compare with it in mind).

    python benchmarks/make_many_ranks.py 512 /tmp/many/dlrm_512
    python benchmarks/bench_convert_ranks.py /tmp/many/dlrm_512 [--rounds 2] [--commands convert,analyze]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys
from charllm_trace.cli.app import main
code = 0
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit as e:
    code = e.code or 0
me = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"rc": code, "self_cpu": me.ru_utime + me.ru_stime, "self_mib": me.ru_maxrss / 1024}), file=sys.stderr)
"""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(cmd: list[str]) -> tuple[float, float, float, dict]:
    """(wall s, CPU s, load1 before, the command's own CPU s and peak MiB) of one command in a
    fresh process."""
    load1 = os.getloadavg()[0]
    c0, t0 = _cpu(), time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, *cmd], capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    stats = json.loads(p.stderr.strip().splitlines()[-1])
    if stats["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd[:2])} failed: {p.stderr.strip()[-400:]}")
    return wall, cpu, load1, stats


def commands(run: Path, out: Path) -> dict[str, list[str]]:
    return {
        "convert": ["convert", str(run), "-o", str(out / "et"), "--force"],
        "analyze": [
            "analyze",
            str(run),
            "--no-cache",
            "--no-critical-path",
            "--format",
            "json",
            "-o",
            str(out / "a.json"),
            "--force",
        ],  # fmt: skip
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="an N-rank run directory (make_many_ranks.py)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--commands", default="convert,analyze")
    a = ap.parse_args(argv)
    n = len(list(a.run.glob("kineto_rank*.json.gz")))
    out = Path(tempfile.mkdtemp(prefix="charllm-bench-convert-"))
    try:
        cmds = commands(a.run, out)
        print(f"{'command':<8} {'ranks':>5} {'wall s':>7} {'CPU s':>7} {'driver CPU s':>12} {'driver MiB':>10} "
              f"{'cores':>5} {'ranks/s':>7} {'load1':>6}")  # fmt: skip
        for _ in range(a.rounds):
            for name in a.commands.split(","):
                wall, cpu, load1, st = run_one(cmds[name])
                print(f"{name:<8} {n:>5} {wall:>7.1f} {cpu:>7.1f} {st['self_cpu']:>12.1f} {st['self_mib']:>10.0f} "
                      f"{cpu / wall:>5.2f} {n / wall:>7.2f} {load1:>6.2f}", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
