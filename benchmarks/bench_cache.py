"""A second ``charllm-trace analyze`` of the same input: the input cache plus the results cache
(issue 12 item 3), as whole processes.

For each input and each set of options, ``--rounds`` rounds, each with a fresh empty cache
directory (``CHARLLM_TRACE_CACHE_DIR``), each command a process of its own under
``/usr/bin/time -v`` (wall clock and peak RSS):

  first      ``analyze INPUT --format F [options]``: converts, analyses, stores both entries;
  second     the same command again: a results-cache hit (nothing loaded or analysed);
  no-cache   the same with ``--no-cache``: converts and analyses, stores nothing.

The standard output of the three is compared byte for byte (the benchmark stops if they
differ). Then one more hit under ``python -X importtime`` gives the hit's import time.

The commands run a copy of the package taken when the benchmark starts (``PYTHONPATH``): the
caches' keys cover the source code, so an edit of the working tree during the benchmark (a
shared checkout) would otherwise turn a second run into a miss.

Usage::

    python benchmarks/bench_cache.py a100x25.json ../shared/traces/hta/a100_ddp_nccl_rank0.json.gz \\
        [--rounds 3] [--formats json,table] [--option-sets default,--no-critical-path]

Prints one line per run (with the 1-minute load average before it), then per input, format
and options the range over rounds of each time, of first/second, and of peak RSS.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TIME = "/usr/bin/time"


#: the directory the commands run in (the package snapshot's: ``python -m`` puts the current
#: directory first on sys.path, before PYTHONPATH)
CWD: str | None = None


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """(wall s, peak RSS MiB, stdout) of ``cmd`` under /usr/bin/time -v."""
    p = subprocess.run([TIME, "-v", *cmd], capture_output=True, env=env, cwd=CWD)
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", err)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    if wall is None or rss is None:
        sys.exit(f"cannot read /usr/bin/time's report:\n{err[-2000:]}")
    h, m, s = wall.groups()
    return (int(h or 0) * 3600 + int(m) * 60 + float(s), int(rss.group(1)) / 1024.0, p.stdout)


def _import_s(cmd: list[str], env: dict[str, str]) -> tuple[float, list[tuple[float, str]]]:
    """Total top-level import time of ``cmd`` (python -X importtime), and the largest five."""
    p = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, env=env, cwd=CWD)
    top = []
    for line in p.stderr.decode(errors="replace").splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if m and not m.group(2).startswith(" "):
            top.append((int(m.group(1)) / 1e6, m.group(2)))
    return sum(t for t, _ in top), sorted(top, reverse=True)[:5]


def _range(v: list[float], fmt: str = "{:.2f}") -> str:
    lo, hi = min(v), max(v)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="traces to analyse (files or directories)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--formats", default="json", help="comma-separated: json, table")
    ap.add_argument(
        "--option-sets", default="default,--no-critical-path", help="comma-separated; 'default' = no options"
    )
    args = ap.parse_args()
    global CWD
    exe = [sys.executable, "-m", "charllm_trace.cli.app"]
    args.inputs = [str(Path(p).resolve()) for p in args.inputs]  # the commands run elsewhere
    snapshot = Path(tempfile.mkdtemp(prefix="bench-cache-code-"))
    shutil.copytree(Path(__file__).resolve().parent.parent / "charllm_trace", snapshot / "charllm_trace")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(snapshot), *filter(None, [os.environ.get("PYTHONPATH")])])
    CWD = str(snapshot)
    probe = subprocess.run(
        [sys.executable, "-c", "import charllm_trace; print(charllm_trace.__file__)"],
        capture_output=True,
        text=True,
        cwd=CWD,
    )
    if not probe.stdout.startswith(str(snapshot)):
        sys.exit(f"the commands would not run the snapshot: {probe.stdout.strip()} {probe.stderr[-500:]}")
    try:
        _bench(args, exe)
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)


def _bench(args: argparse.Namespace, exe: list[str]) -> None:
    summary = []
    for inp in args.inputs:
        for fmt in args.formats.split(","):
            for opt in args.option_sets.split(","):
                extra = [] if opt == "default" else opt.split()
                cmd = [*exe, "analyze", inp, "--format", fmt, *extra]
                rows: dict[str, list[tuple[float, float]]] = {"first": [], "second": [], "no-cache": []}
                loads = []
                imports: list[float] = []
                top: list[tuple[float, str]] = []
                for rnd in range(args.rounds):
                    cache = Path(tempfile.mkdtemp(prefix="bench-cache-"))
                    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache)}
                    env.pop("CHARLLM_TRACE_NO_CACHE", None)
                    try:
                        outs = {}
                        for what, c in (("first", cmd), ("second", cmd), ("no-cache", [*cmd, "--no-cache"])):
                            load = os.getloadavg()[0]
                            loads.append(load)
                            wall, rss, out = _timed(c, env)
                            rows[what].append((wall, rss))
                            outs[what] = out
                            print(
                                f"{Path(inp).name} {fmt} {opt} round {rnd + 1} {what}: {wall:.2f} s, "
                                f"{rss:.0f} MiB (load {load:.2f})",
                                flush=True,
                            )
                        if not (outs["first"] == outs["second"] == outs["no-cache"]):
                            sys.exit(f"outputs differ for {' '.join(cmd)}")
                        s, t = _import_s(cmd, env)
                        imports.append(s)
                        top = t
                    finally:
                        shutil.rmtree(cache, ignore_errors=True)
                ratio = [f / s for (f, _), (s, _) in zip(rows["first"], rows["second"], strict=True)]
                summary.append(
                    f"| {Path(inp).name} | {fmt} | {opt} | {_range([w for w, _ in rows['first']])} s | "
                    f"{_range([w for w, _ in rows['second']])} s | {_range([w for w, _ in rows['no-cache']])} s | "
                    f"**{_range(ratio, '{:.1f}')}×** | {_range([r for _, r in rows['first']], '{:.0f}')} / "
                    f"{_range([r for _, r in rows['second']], '{:.0f}')} MiB | {_range(imports)} s | "
                    f"{_range(loads)} |"
                )
                print("  hit's largest imports: " + ", ".join(f"{n} {t:.3f} s" for t, n in top), flush=True)
    print()
    print(
        "| input | format | options | first | second (hit) | --no-cache | first/second | "
        "peak RSS first / second | hit's imports | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for line in summary:
        print(line)


if __name__ == "__main__":
    main()
