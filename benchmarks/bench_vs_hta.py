"""The default ``charllm-trace analyze`` against Holistic Trace Analysis 0.5.0, whole processes,
on several profiles of different shapes (issue 26 item 1).

Each profile is a real Kineto profile of ``../shared/traces`` repeated N times (shifted in time,
ids and ProfilerStep numbers offset: ``bench_analyze.make_trace``), written gzip'd to a temporary
directory (removed afterwards; shared data is never copied into the project):

============  ===============================================================  =====
name          source                                                           copies
============  ===============================================================  =====
nccl-noargs   V100 DLRM rank 0 (8 NCCL kernels per copy, no size args)         263
conv-gemm     ResNet training on an RTX 2080 Ti (9,628 kernels per copy,       4
              convolutions / GEMMs)
small-kern    ResNet DDP on an A100 (2,700 kernels per copy, median 16 µs,     10
              21 NCCL kernels with size args)
cpu-only      rank 0 of the 2-rank CPU gloo fixture (no GPU events)            60
inference     Qwen1.5-0.5B inference on an H100 (TraceLens; no CUDA graph      20
              launches: none of the shared traces has any)
============  ===============================================================  =====

The two tools, each as a fresh process on the same file, alternated (the order flips every
round), caches off:

- ours: ``python -m charllm_trace analyze FILE --no-cache --format json`` (the default
  analysis, critical path on), stdout to a file;
- HTA: ``TraceAnalysis(trace_dir=...)`` (load) + ``get_comm_comp_overlap`` +
  ``get_temporal_breakdown`` in the interpreter of ``--hta-python`` (HTA's own venv, outside
  the repository); ``--hta-critical-path`` adds its ``critical_path_analysis`` of the first
  ProfilerStep.

Wall time by the parent; CPU time (user + system) and peak RSS from ``os.wait4`` of that child
(Linux ``ru_maxrss``, KiB). Our Python files are byte-compiled first into a private
``PYTHONPYCACHEPREFIX`` (an installed package has its ``.pyc``; HTA's venv has them), and each
tool runs once untimed on the smallest profile so that neither pays first-touch costs in the
timed rounds.

Usage::

    python benchmarks/bench_vs_hta.py --hta-python /path/to/hta-venv/bin/python --rounds 3
    python benchmarks/bench_vs_hta.py --hta-python ... --profiles nccl-noargs,inference

Prints one line per run and, per profile, the median and range of each tool and the ratios
(HTA / ours wall and CPU; ours / HTA peak RSS), with the load average. ``--repeat`` first times,
per profile and round, a first ``analyze`` with the cache on (empty cache) and the same command
again (the cache hit), and prints first / hit; ``--repeat-format table`` times the default terminal
output (a table, stdout to a file: 80 columns) instead of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_analyze  # noqa: E402  (the trace repeater; a sibling script, not a package)

ROOT = Path(__file__).resolve().parent.parent
SHARED = bench_analyze.SHARED
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
#: id-like args offset per copy: bench_analyze's, and the Python-tracer ids (TraceLens profiles)
bench_analyze.ID_ARGS = (*bench_analyze.ID_ARGS, "Python id", "Python parent id")


@dataclass(frozen=True)
class Profile:
    name: str
    source: Path
    copies: int
    shape: str


PROFILES = [
    Profile("nccl-noargs", SHARED / "param/dlrm_8ranks_v100/kineto_rank0.json.gz", 263,
            "V100 DLRM, NCCL kernels without size args"),
    Profile("conv-gemm", SHARED / "param/resnet_kineto.json.gz", 4,
            "ResNet training, RTX 2080 Ti: convolutions / GEMMs"),
    Profile("small-kern", SHARED / "hta/a100_ddp_nccl_rank0.json.gz", 10,
            "ResNet DDP, A100: many small kernels (median 16 us), NCCL with size args"),
    Profile("cpu-only", FIXTURES / "cpu-2rank-gloo/rank-0.kineto.json.gz", 60,
            "CPU-only gloo run: no GPU events"),
    Profile("inference", SHARED / "tracelens/h100_qwen1.5-0.5b_inference.json.gz", 20,
            "Qwen1.5-0.5B inference, H100 (no CUDA graph launches in any shared trace)"),
]  # fmt: skip

HTA_CHILD = r"""
import logging, os, sys, tempfile, shutil
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
path, cp = sys.argv[1], sys.argv[2] == "1"
d = tempfile.mkdtemp(prefix="hta-bench-")
os.symlink(os.path.abspath(path), os.path.join(d, "rank-0.json.gz"))
try:
    ta = TraceAnalysis(trace_dir=d)
    ta.get_comm_comp_overlap(visualize=False)
    ta.get_temporal_breakdown(visualize=False)
    if cp:
        ta.critical_path_analysis(rank=0, annotation="ProfilerStep", instance_id=0)
finally:
    shutil.rmtree(d)
"""


@dataclass
class Measured:
    ok: bool
    wall_s: float
    cpu_s: float
    rss_mib: float
    load: float
    why: str = ""


def run_measured(cmd: list[str], env: dict[str, str], stdout_path: Path, timeout: float) -> Measured:
    """Run ``cmd`` as a child; wall by this process, CPU and peak RSS from ``wait4`` of the child."""
    load = os.getloadavg()[0]
    with open(stdout_path, "wb") as out:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.PIPE, cwd=ROOT)
        deadline = t + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace").strip() if p.stderr else ""
    why = "" if p.returncode == 0 else f"exit {p.returncode}: {err.splitlines()[-1] if err else ''}"
    if wall > timeout:
        why = f"killed after {timeout:.0f} s"
    return Measured(not why, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, load, why)


def ours_cmd(path: Path, cache: bool = False, fmt: str = "json") -> list[str]:
    """The ``charllm-trace`` program (its entry point, cli/front.py, as the installed script)."""
    cmd = [sys.executable, "-m", "charllm_trace", "analyze", str(path), "--format", fmt]
    return cmd if cache else [*cmd, "--no-cache"]


def repeat_rounds(
    name: str, path: Path, env: dict[str, str], work: Path, rounds: int, timeout: float, fmt: str = "json"
) -> None:
    """The results cache (issue 26 item 2): per round, a first ``analyze`` with the cache on (an
    empty cache directory: it analyses and stores) and the same command again (a hit)."""
    firsts, hits = [], []
    for r in range(rounds):
        cdir = work / f"cache-{name}-{r}"
        shutil.rmtree(cdir, ignore_errors=True)
        e = {**env, "CHARLLM_TRACE_CACHE_DIR": str(cdir)}
        e.pop("CHARLLM_TRACE_NO_CACHE", None)
        first = run_measured(ours_cmd(path, True, fmt), e, work / f"{name}.first.out", timeout)
        hit = run_measured(ours_cmd(path, True, fmt), e, work / f"{name}.hit.out", timeout)
        same = (work / f"{name}.first.out").read_bytes() == (work / f"{name}.hit.out").read_bytes()
        shutil.rmtree(cdir, ignore_errors=True)
        firsts.append(first)
        hits.append(hit)
        print(
            f"{name:12s} round {r} first wall {first.wall_s:6.2f} s cpu {first.cpu_s:6.2f} s | hit wall "
            f"{hit.wall_s:5.3f} s cpu {hit.cpu_s:5.3f} s rss {hit.rss_mib:4.0f} MiB | same output {same} "
            f"load {first.load:.1f}",
            flush=True,
        )
    med = statistics.median
    print(
        f"== {name} repeat ({fmt}): first/hit wall {med(m.wall_s for m in firsts) / med(m.wall_s for m in hits):.1f}x "
        f"(worst pair {min(m.wall_s for m in firsts) / max(m.wall_s for m in hits):.1f}x), "
        f"cpu {med(m.cpu_s for m in firsts) / med(m.cpu_s for m in hits):.1f}x",
        flush=True,
    )


def hta_cmd(hta_python: str, path: Path, critical_path: bool) -> list[str]:
    return [hta_python, "-c", HTA_CHILD, str(path), "1" if critical_path else "0"]


def make_profile(p: Profile, work: Path) -> tuple[Path, int]:
    out = work / f"{p.name}.json.gz"
    made = subprocess.run(
        [sys.executable, "-c",
         "import sys; sys.path.insert(0, 'benchmarks'); import bench_vs_hta as b; from pathlib import Path; "
         f"print(b.bench_analyze.make_trace({p.copies}, Path({str(out)!r}), Path({str(p.source)!r})))"],
        check=True, cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    return out, int(made.stdout.split()[-1])


def _span(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} [{format(min(xs), fmt)}-{format(max(xs), fmt)}]"


def summary(name: str, runs: dict[str, list[Measured]]) -> dict:
    o = [m for m in runs["ours"] if m.ok]
    h = [m for m in runs["hta"] if m.ok]
    row: dict = {"profile": name, "ours_ok": len(o), "hta_ok": len(h)}
    for tool, ms in (("ours", o), ("hta", h)):
        if ms:
            row[tool] = {k: [getattr(m, k) for m in ms] for k in ("wall_s", "cpu_s", "rss_mib", "load")}
    if o and h:
        med = statistics.median
        row["ratio_wall"] = med(m.wall_s for m in h) / med(m.wall_s for m in o)
        row["ratio_wall_worst"] = min(m.wall_s for m in h) / max(m.wall_s for m in o)
        row["ratio_cpu"] = med(m.cpu_s for m in h) / med(m.cpu_s for m in o)
        row["rss_fraction"] = max(m.rss_mib for m in o) / min(m.rss_mib for m in h)
    return row


def print_summary(row: dict) -> None:
    print(f"== {row['profile']}", flush=True)
    for tool in ("ours", "hta"):
        if tool in row:
            d = row[tool]
            print(
                f"   {tool:4s} wall {_span(d['wall_s'], '.2f')} s  cpu {_span(d['cpu_s'], '.2f')} s  "
                f"rss {_span(d['rss_mib'], '.0f')} MiB  load {_span(d['load'], '.1f')}",
                flush=True,
            )
        else:
            print(f"   {tool:4s} no successful run", flush=True)
    if "ratio_wall" in row:
        print(
            f"   ratio HTA/ours wall {row['ratio_wall']:.1f}x (worst pair {row['ratio_wall_worst']:.1f}x), "
            f"cpu {row['ratio_cpu']:.1f}x; ours/HTA peak RSS {row['rss_fraction']:.2f}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--hta-python", required=True, help="the python of a venv with HolisticTraceAnalysis 0.5.0"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profiles", default=",".join(p.name for p in PROFILES))
    ap.add_argument("--hta-critical-path", action="store_true", help="also HTA's critical_path_analysis")
    ap.add_argument("--timeout", type=float, default=600.0, help="per run (s)")
    ap.add_argument("--workdir", default=None, help="keep (and reuse) the profiles here")
    ap.add_argument("--json", default=None, help="also write the per-profile summaries to this file")
    ap.add_argument("--repeat", action="store_true", help="also time a first analyze and its cache hit")
    ap.add_argument("--repeat-only", action="store_true", help="only --repeat (HTA not run)")
    ap.add_argument(
        "--repeat-format", choices=("json", "table"), default="json", help="the format --repeat prints"
    )
    a = ap.parse_args()
    wanted = a.profiles.split(",")
    profiles = [p for p in PROFILES if p.name in wanted]
    for p in profiles:
        if not p.source.exists():
            sys.exit(f"{p.source}: not found (set CHARLLM_SHARED)")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="charllm-vs-hta-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    env["XDG_CACHE_HOME"] = str(work / "xdg")  # --no-cache anyway; never the user's cache
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-m", "compileall", "-q", "charllm_trace"], env=env, cwd=ROOT, check=True)
    try:
        paths = {}
        for p in profiles:
            path = work / f"{p.name}.json.gz"
            n_file = path.with_name(path.name + ".events")
            if path.exists() and n_file.exists():
                n = int(n_file.read_text())
            else:
                path, n = make_profile(p, work)
                n_file.write_text(str(n))
            paths[p.name] = path
            print(f"# {p.name}: {p.shape}; {p.copies} copies, {n:,} events, "
                  f"{path.stat().st_size / 1e6:.1f} MB gzip'd", flush=True)  # fmt: skip
        os.sync()
        smallest = min(paths.values(), key=lambda q: q.stat().st_size)
        run_measured(ours_cmd(smallest), env, work / "warm.out", a.timeout)  # untimed warm-up
        if not a.repeat_only:
            run_measured(hta_cmd(a.hta_python, smallest, False), env, work / "warm.out", a.timeout)
        if a.repeat or a.repeat_only:
            for p in profiles:
                repeat_rounds(p.name, paths[p.name], env, work, a.rounds, a.timeout, a.repeat_format)
            if a.repeat_only:
                return
        rows = []
        for p in profiles:
            runs: dict[str, list[Measured]] = {"ours": [], "hta": []}
            for r in range(a.rounds):
                order = ("ours", "hta") if r % 2 == 0 else ("hta", "ours")
                for tool in order:
                    cmd = (
                        ours_cmd(paths[p.name])
                        if tool == "ours"
                        else hta_cmd(a.hta_python, paths[p.name], a.hta_critical_path)
                    )
                    m = run_measured(cmd, env, work / f"{p.name}.{tool}.out", a.timeout)
                    runs[tool].append(m)
                    state = "" if m.ok else f"  FAILED {m.why}"
                    print(
                        f"{p.name:12s} round {r} {tool:4s} wall {m.wall_s:6.2f} s cpu {m.cpu_s:6.2f} s "
                        f"rss {m.rss_mib:6.0f} MiB load {m.load:.1f}{state}",
                        flush=True,
                    )
            row = summary(p.name, runs)
            rows.append(row)
            print_summary(row)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
