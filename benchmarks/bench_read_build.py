"""Benchmark: the cold ``analyze`` from the file to the model tables (issue 26 item 1) — the Kineto
read and each step of building the trace, and the whole command, on the five profile shapes of
``bench_vs_hta.py``, code versions interleaved.

Each code version is a checkout (``--code NAME=DIR``: a worktree, or ``git archive`` of a commit,
with its C extensions built). Per profile and round, for each version in turn (the order flips
every round), two fresh processes with ``PYTHONPATH=DIR``:

- the whole command, ``python -m charllm_trace.cli.app analyze FILE --no-cache --format json``:
  CPU time (user + system) and peak RSS from ``os.wait4`` of the child, wall by the parent, its
  stdout kept (the outputs of the versions are compared byte for byte);
- the stages: ``read_kineto`` and then, one by one, the steps of ``build.kineto_trace`` (the call
  tree, ``link_gpu``, node types, ``annotate_collectives``, ``attrs``, the metadata, the control
  dependencies), each timed by ``time.process_time`` (all threads of the process: polars' too).

The profiles are made as ``bench_vs_hta.py`` makes them (``--workdir`` keeps and reuses them).
Prints one line per run, then per profile and version the median and range of each figure, with
the 1-minute load average seen before each run.

    python benchmarks/bench_read_build.py --code before=/tmp/base --code after=. [--rounds 3] \
        [--profiles nccl-noargs,conv-gemm] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_vs_hta  # noqa: E402  (the profiles and the measured run; a sibling script)

STAGES = r"""
import json, sys, time
c = time.process_time
t0 = c()
from charllm_trace.converters import build_steps as bs
from charllm_trace.converters.annotate import annotate_collectives
from charllm_trace.converters.kineto import read_kineto
out = {"imports": c() - t0}
def st(name, f, *a):
    t = c(); r = f(*a); out[name] = c() - t; return r
prof = st("read_kineto", read_kineto, sys.argv[1])
ev = prof.events.rename({"row": "id"})
prof.events = prof.events.clear()
ev = st("cpu_tree", bs.cpu_tree, ev)
ev, _ = st("link_gpu", bs.link_gpu, ev)
ev = st("node_types", bs.node_types, ev)
ev, _, pgs = st("annotate", annotate_collectives, ev, prof.comm_args, prof)
attrs = st("attrs", bs.attrs_column, ev, prof.comm_args)
nodes = ev.drop("_rt_id", "cat").with_columns(attrs)
st("meta", bs.meta_from_profile, prof, ev, pgs)
st("deps", bs.control_deps, nodes)
out["build"] = sum(v for k, v in out.items() if k not in ("imports", "read_kineto"))
out["read+build"] = out["read_kineto"] + out["build"]
print(json.dumps(out))
"""

FIGURES = ("analyze_cpu", "analyze_wall", "analyze_rss", "read_kineto", "build", "read+build",
           "cpu_tree", "link_gpu", "annotate", "attrs")  # fmt: skip


def run_version(code: Path, path: Path, work: Path, name: str, timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(code)
    env["PYTHONPYCACHEPREFIX"] = str(work / f"pycache-{name}")
    env["XDG_CACHE_HOME"] = str(work / "xdg")
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
    bench_vs_hta.ROOT = code  # the child's cwd: ``-m`` puts it first on sys.path, before PYTHONPATH
    m = bench_vs_hta.run_measured(cmd, env, work / f"{path.stem}.{name}.out", timeout)
    if not m.ok:
        raise SystemExit(f"{name} on {path.name}: {m.why}")
    st = subprocess.run(
        [sys.executable, "-c", STAGES, str(path)],
        env=env,
        cwd=code,
        check=True,
        capture_output=True,
        text=True,
    )
    row = json.loads(st.stdout.strip().splitlines()[-1])
    row.update(analyze_cpu=m.cpu_s, analyze_wall=m.wall_s, analyze_rss=m.rss_mib, load=m.load)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", action="append", required=True, help="NAME=DIR, a checkout (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profiles", default=",".join(p.name for p in bench_vs_hta.PROFILES))
    ap.add_argument("--workdir", default=None, help="keep (and reuse) the profiles here")
    ap.add_argument("--timeout", type=float, default=600.0)
    a = ap.parse_args()
    codes = {k: Path(v).resolve() for k, v in (c.split("=", 1) for c in a.code)}
    wanted = a.profiles.split(",")
    profiles = [p for p in bench_vs_hta.PROFILES if p.name in wanted]
    work = Path(a.workdir or tempfile.mkdtemp(prefix="charllm-read-build-"))
    work.mkdir(parents=True, exist_ok=True)
    for name, code in codes.items():
        env = {**os.environ, "PYTHONPYCACHEPREFIX": str(work / f"pycache-{name}")}
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "charllm_trace"], env=env, cwd=code, check=True
        )
    for p in profiles:
        path = work / f"{p.name}.json.gz"
        if not path.exists():
            path, _ = bench_vs_hta.make_profile(p, work)
        runs: dict[str, list[dict]] = {n: [] for n in codes}
        for r in range(a.rounds):
            order = list(codes) if r % 2 == 0 else list(codes)[::-1]
            for name in order:
                row = run_version(codes[name], path, work, name, a.timeout)
                runs[name].append(row)
                print(f"{p.name:12s} round {r} {name:8s} " + " ".join(
                    f"{k}={row[k]:.3f}" for k in FIGURES) + f" load={row['load']:.1f}", flush=True)  # fmt: skip
            outs = {work.joinpath(f"{path.stem}.{n}.out").read_bytes() for n in codes}
            print(f"{p.name:12s} round {r} outputs {'identical' if len(outs) == 1 else 'DIFFER'}", flush=True)
        for name, rows in runs.items():
            cells = []
            for k in FIGURES:
                xs = [x[k] for x in rows]
                cells.append(f"{k}={statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]")
            loads = [x["load"] for x in rows]
            print(
                f"== {p.name} {name}: " + " ".join(cells) + f" load {min(loads):.1f}-{max(loads):.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
