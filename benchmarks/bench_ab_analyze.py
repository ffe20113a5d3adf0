"""The cold ``analyze`` of two source trees of charllm-trace, alternated, on the profile shapes of
``bench_vs_hta.py`` (issue 26 item 1: what a change did to our side alone, HTA not run).

Each tree (a checkout of this repository, ``--before`` and ``--after``; their compiled
extensions in place) runs ``python -m charllm_trace.cli.app analyze FILE --no-cache --format
json`` as a fresh process with that tree first on ``PYTHONPATH``; the order flips every round.
CPU time (user + system) and peak RSS (``ru_maxrss``) from ``os.wait4`` of the child, the load
average at its start; each tree's sources byte-compiled first into its own
``PYTHONPYCACHEPREFIX`` and run once untimed. Both outputs of every profile are compared byte for
byte (the last round's).

Usage::

    python benchmarks/bench_ab_analyze.py --before /path/to/base-checkout --after . --rounds 3 \\
        --workdir /tmp/profiles [--profiles nccl-noargs,conv-gemm]

The profiles are made as ``bench_vs_hta.py`` makes them (kept in ``--workdir``, reused when there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_vs_hta  # noqa: E402  (the profiles; a sibling script, not a package)


def run(tree: Path, path: Path, out: Path, work: Path, tag: str) -> tuple[float, float, float, int]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        PYTHONPATH=str(tree),
        PYTHONPYCACHEPREFIX=str(work / f"pycache-{tag}"),
        XDG_CACHE_HOME=str(work / "xdg"),
    )
    cmd = [
        sys.executable,
        "-m",
        "charllm_trace.cli.app",
        "analyze",
        str(path),
        "--no-cache",
        "--format",
        "json",
    ]
    load = os.getloadavg()[0]
    with open(out, "wb") as f:
        p = subprocess.Popen(cmd, stdout=f, env=env, cwd=tree)
        _, status, ru = os.wait4(p.pid, 0)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, load, os.waitstatus_to_exitcode(status)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, type=Path)
    ap.add_argument("--after", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profiles", default=",".join(p.name for p in bench_vs_hta.PROFILES))
    ap.add_argument("--workdir", required=True, type=Path)
    a = ap.parse_args()
    trees = {"before": a.before.resolve(), "after": a.after.resolve()}
    work = a.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for tag, tree in trees.items():
        env = {**os.environ, "PYTHONPYCACHEPREFIX": str(work / f"pycache-{tag}")}
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "charllm_trace"], cwd=tree, env=env, check=True
        )
    for p in bench_vs_hta.PROFILES:
        if p.name not in a.profiles.split(","):
            continue
        path = work / f"{p.name}.json.gz"
        if not path.exists():
            path, _ = bench_vs_hta.make_profile(p, work)
        for tag, tree in trees.items():  # untimed first run
            run(tree, path, work / f"{p.name}.{tag}.out", work, tag)
        got: dict[str, list[tuple[float, float, float, int]]] = {t: [] for t in trees}
        for r in range(a.rounds):
            for tag in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                m = run(trees[tag], path, work / f"{p.name}.{tag}.out", work, tag)
                got[tag].append(m)
                print(
                    f"{p.name:12s} round {r} {tag:6s} cpu {m[0]:5.2f} s rss {m[1]:4.0f} MiB load {m[2]:.1f} exit {m[3]}"
                )
        same = (work / f"{p.name}.before.out").read_bytes() == (work / f"{p.name}.after.out").read_bytes()
        for tag, ms in got.items():
            cpu, rss, load = ([m[i] for m in ms] for i in range(3))
            print(
                f"== {p.name} {tag}: cpu {statistics.median(cpu):.2f} s [{min(cpu):.2f}-{max(cpu):.2f}], "
                f"peak RSS {statistics.median(rss):.0f} MiB [{min(rss):.0f}-{max(rss):.0f}], "
                f"load {min(load):.1f}-{max(load):.1f}; outputs identical: {same}",
                flush=True,
            )


if __name__ == "__main__":
    main()
