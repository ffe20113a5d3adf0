"""Critical-path analysis vs Holistic Trace Analysis 0.5.0 on the same Kineto input.

What it measures
----------------
Whole-process wall time and peak resident memory of two programs, each run in its own
fresh process on the same large Kineto profile:

- ours: the CLI, ``charllm-trace analyze PROFILE --critical-path --format json`` (stdout
  goes to a file in the work directory: parse + every analysis + critical path + JSON
  rendering, i.e. everything a user waits for). Where ``analyze --help`` has no
  ``--critical-path`` but has ``--no-critical-path`` (the critical path is on by default),
  ours is ``analyze PROFILE --format json``; the command used is printed first;
- ours-base (optional, ``--tools ours-base``): the same command without the critical path
  (``--no-critical-path`` where it exists), so the difference is what the critical path
  itself costs;
- HTA: ``TraceAnalysis(trace_files={0: PROFILE}, include_last_profiler_step=True)``
  (parse) + ``critical_path_analysis(rank=0, annotation="", instance_id=None)`` (HTA's
  own "whole trace" window, ``hta/analyzers/critical_path_analysis.py:1576``; with
  ``--hta-window steps`` it is ``annotation="ProfilerStep", instance_id=(0, n-1)``, every
  step) + ``get_critical_path_breakdown()`` and the ``summary()`` percentages computed
  from it (``summary()`` would rebuild the breakdown a second time). HTA runs under the
  interpreter given by ``--hta-python`` (a virtual environment with
  ``holistictraceanalysis==0.5.0`` and ``pandas<3``: HTA's critical path raises a
  ValueError under pandas 3); without ``--hta-python`` HTA is skipped with a message.
  ``include_last_profiler_step=True`` because ours analyses the whole profile; pass
  ``--hta-drop-last-step`` for HTA's default (CPU events from the last ProfilerStep's start
  onwards are dropped at load time).

The profile: ``--profile PATH`` reuses an existing Kineto JSON (never deleted); otherwise
one is built with ``bench_analyze.make_trace`` (the A100 DDP profile,
``../shared/traces/hta/a100_ddp_nccl_rank0.json.gz``, 40,573 events, repeated ``--reps``
times, shifted in time with ids and ProfilerStep numbers offset; 25 copies = 1,013,413
events, ~1.0 M) in a separate process, and removed at the end unless ``--keep``.

Wall time is measured by this parent from spawn to exit. Peak RSS is the child's
``ru_maxrss`` from ``os.wait4``. Linux folds the high-water mark of the address space
that ``exec`` replaces into it, i.e. this parent's own peak at the spawn, so it is
max(parent peak, child ``VmHWM``); the parent never loads a trace (the builder is a
separate process) and stays at a few tens of MiB, which is printed as ``parent_hwm`` so
the figure can be checked. The HTA child also reports its own ``VmHWM``. A watchdog polls
the child's ``VmRSS`` and kills it above ``--mem-limit-gib`` or after the timeout.

Usage (from the repository root)::

    # ~1.0 M events, both tools
    .venv/bin/python benchmarks/bench_critical_path.py --hta-python ../hta-venv/bin/python   # a venv with HTA 0.5.0 + pandas<3
    # reuse a profile, several sizes, keep the built files
    .venv/bin/python benchmarks/bench_critical_path.py --profile /tmp/a100x25.json --hta-python ...
    .venv/bin/python benchmarks/bench_critical_path.py --reps 1,5,25 --keep --workdir /tmp/cp
    # only ours, with the analyse-only baseline
    .venv/bin/python benchmarks/bench_critical_path.py --tools ours,ours-base

Prints one line per (tool, size) and a ratio line per size (HTA/ours wall, ours/HTA RSS).
Only the standard library is imported at module level: the HTA child runs this file
under HTA's interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# ---------------------------------------------------------------- helpers


def vm_kib(pid: int | str, key: str) -> int | None:
    """``VmHWM`` / ``VmRSS`` (KiB) of ``pid`` from /proc, None where unavailable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def self_hwm_mib() -> float:
    """This process's peak RSS (MiB): ``VmHWM`` where Linux has it, else ``ru_maxrss``."""
    k = vm_kib("self", "VmHWM")
    if k is None:
        k = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return k / 1024


def default_cli() -> list[str]:
    """The ``charllm-trace`` command: beside this interpreter, else on PATH, else ``-m``."""
    beside = Path(sys.executable).parent / "charllm-trace"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("charllm-trace")
    if found:
        return [found]
    return [sys.executable, "-m", "charllm_trace.cli.app"]


def count_events(path: Path) -> int | None:
    """Event count of a Kineto JSON (for ``--profile``), read in a separate process so that
    this parent's peak RSS, which ``ru_maxrss`` of later children includes, stays small."""
    r = subprocess.run([sys.executable, __file__, "--count", str(path)], capture_output=True, text=True)
    try:
        return int(r.stdout.split()[-1])
    except (ValueError, IndexError):
        return None


def _count_main(path: str) -> None:
    import gzip

    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        print(len(json.load(f)["traceEvents"]))


# ---------------------------------------------------------------- HTA child


def child_hta(path: str, window: str, keep_last: bool) -> dict:
    """Runs under HTA's interpreter: parse + critical path + breakdown, timed by phase."""
    import logging

    epoch_enter = time.time()
    logging.disable(logging.WARNING)  # HTA warns once per odd kernel; not part of the work
    from hta.trace_analysis import TraceAnalysis

    import_s = time.time() - epoch_enter

    d = tempfile.mkdtemp(prefix="hta-cp-")
    try:
        # HTA wants a .json / .gz name; trace_dir must exist
        name = "rank-0.json.gz" if path.endswith(".gz") else "rank-0.json"
        link = os.path.join(d, name)
        os.symlink(os.path.abspath(path), link)
        t = time.perf_counter()
        ta = TraceAnalysis(trace_files={0: link}, trace_dir=d, include_last_profiler_step=keep_last)
        t_load = time.perf_counter() - t
        rss_load = self_hwm_mib()
        if window == "all":
            annotation, inst = "", None
        else:
            df = ta.t.get_trace(0)
            ids = [v for k, v in ta.t.symbol_table.get_sym_id_map().items() if "ProfilerStep" in k]
            n = int(df.name.isin(ids).sum())
            annotation, inst = "ProfilerStep", (0, max(n - 1, 0))
        t1 = time.perf_counter()
        out = ta.critical_path_analysis(rank=0, annotation=annotation, instance_id=inst)
        if out is None:
            raise RuntimeError(f"critical_path_analysis returned None (annotation={annotation!r})")
        g, ok = out
        t_cp = time.perf_counter() - t1
        res = {
            "epoch_enter": epoch_enter,
            "import_s": import_s,
            "load_s": t_load,
            "cp_s": t_cp,
            "success": bool(ok),
            "graph_nodes": g.number_of_nodes(),
            "graph_edges": g.number_of_edges(),
            "peak_rss_after_load_mib": rss_load,
            "window": [annotation, inst],
        }
        if ok:
            t2 = time.perf_counter()
            br = g.get_critical_path_breakdown()
            total = float(br.duration.sum())
            by = br.groupby("bound_by").duration.sum()
            res["breakdown_s"] = time.perf_counter() - t2
            res["cp_length_us"] = int(total)
            res["cp_edges"] = len(br)
            # what CPGraph.summary() returns (critical_path_analysis.py:1352), plus the µs
            res["summary_pct"] = {str(k): float(v) / total * 100 if total else 0.0 for k, v in by.items()}
            res["summary_us"] = {str(k): int(v) for k, v in by.items()}
        return res
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _child_main(args: list[str]) -> None:
    path, window, keep_last = args[0], args[1], args[2] == "1"
    res = child_hta(path, window, keep_last)
    res["peak_rss_mib"] = self_hwm_mib()
    res["epoch_result"] = time.time()
    print("RESULT " + json.dumps(res), flush=True)


# ---------------------------------------------------------------- parent


def run_timed(cmd: list[str], out_path: Path, timeout: float, mem_limit_gib: float, env=None) -> dict:
    """Run ``cmd`` (stdout -> out_path), return wall, exit code, ru_maxrss, CPU seconds."""
    err_path = out_path.with_suffix(out_path.suffix + ".err")
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        t, epoch_spawn = time.perf_counter(), time.time()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=ROOT, env=env)
    killed: list[str] = []
    polled_hwm = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            rss = vm_kib(p.pid, "VmRSS")
            hwm = vm_kib(p.pid, "VmHWM")
            if hwm:
                polled_hwm[0] = max(polled_hwm[0], hwm)
            if rss is not None and rss > mem_limit_gib * 2**20:
                killed.append(f"killed above {mem_limit_gib:g} GiB RSS")
            elif time.perf_counter() - t > timeout:
                killed.append(f"killed after {timeout:.0f} s")
            if killed:
                try:
                    p.kill()
                except OSError:
                    pass
                return

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall, epoch_exit = time.perf_counter() - t, time.time()
    done.set()
    w.join(1)
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return {
        "wall_s": wall,
        "rc": p.returncode,
        "ru_maxrss_mib": ru.ru_maxrss / 1024,
        "polled_hwm_mib": polled_hwm[0] / 1024,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "killed": killed[0] if killed else None,
        "stderr": err_path.read_text(errors="replace").strip(),
        "out_path": out_path,
        "epoch_spawn": epoch_spawn,
        "epoch_exit": epoch_exit,
    }


def _last_line(s: str) -> str:
    return s.strip().splitlines()[-1] if s.strip() else ""


def run_hta(hta_python: str, profile: Path, work: Path, a) -> dict:
    cmd = [hta_python, str(Path(__file__).resolve()), "--child", str(profile), a.hta_window,
           "0" if a.hta_drop_last_step else "1"]  # fmt: skip
    r = run_timed(cmd, work / "hta.out", a.hta_timeout, a.mem_limit_gib)
    text = Path(r["out_path"]).read_text(errors="replace")
    line = next((ln for ln in text.splitlines() if ln.startswith("RESULT ")), None)
    if line is None or r["rc"] != 0:
        r.update(ok=False, why=r["killed"] or f"exit {r['rc']}: {_last_line(r['stderr'])}")
        return r
    r.update(json.loads(line[len("RESULT ") :]), ok=True)
    # interpreter start-up before the child's first line, and teardown after its result
    r["startup_s"] = r["epoch_enter"] - r["epoch_spawn"]
    r["teardown_s"] = r["epoch_exit"] - r["epoch_result"]
    return r


def _find_cp(doc) -> object:
    """Best effort: the first value under a key naming the critical path, for the log line."""
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            for k, v in x.items():
                if "critical" in str(k).lower():
                    return v
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x[:50])
    return None


def _inspect_main(path: str) -> None:
    """Print one line about ours' JSON output (run as a child, same reason as count_events)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except ValueError as exc:
        print(f"stdout is not JSON ({exc})")
        return
    rows = (doc.get("frames") or {}).get("critical_path") if isinstance(doc, dict) else None
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        # the whole-trace row(s): no step; times in ns
        whole = [r for r in rows if r.get("step") is None] or rows[:1]
        parts = []
        for r in whole:
            ns = {k: v for k, v in r.items() if k.endswith("_ns") and k not in ("start_ns", "end_ns")}
            parts.append(
                f"rank {r.get('rank')}: " + ", ".join(f"{k[:-3]}={v / 1e6:.1f}ms" for k, v in ns.items())
            )
        print(f"critical path ({len(rows)} rows): " + "; ".join(parts))
        return
    cp = _find_cp(doc)
    if cp is None:
        print("no key naming the critical path in the JSON output")
        return
    if isinstance(cp, list):
        cp = {"list_len": len(cp), "first": cp[0] if cp else None}
    s = json.dumps(cp, default=str)
    print("critical path: " + (s if len(s) <= 200 else s[:197] + "..."))


def ours_args(cli: list[str]) -> tuple[list[str], list[str], str]:
    """(args with the critical path, args without it, how that was decided) for ``analyze``.

    The critical path may be opt-in (``--critical-path``) or on by default with
    ``--no-critical-path`` to leave it out; ``analyze --help`` says which this CLI has."""
    base = ["analyze", "{profile}", "--format", "json"]
    try:
        h = subprocess.run(cli + ["analyze", "--help"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        h = ""
    has_on = re.search(r"(?<![\w-])--critical-path\b", h) is not None
    has_off = "--no-critical-path" in h
    if has_on:
        return (
            base + ["--critical-path"],
            base + (["--no-critical-path"] if has_off else []),
            "--critical-path",
        )
    if has_off:
        return base, base + ["--no-critical-path"], "on by default (--no-critical-path exists)"
    # neither: ask for it anyway, so the run fails with a clear message
    return base + ["--critical-path"], base, "no critical-path option in analyze --help"


def run_ours(cli: list[str], profile: Path, work: Path, a, args: list[str], with_cp: bool) -> dict:
    args = [s.format(profile=profile) for s in args]
    args += a.ours_args.split() if a.ours_args else []
    # a private cache dir: nothing from an earlier run can be reused
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(work / "cache")}
    name = "ours.json" if with_cp else "ours-base.json"
    r = run_timed(cli + args, work / name, a.timeout, a.mem_limit_gib, env=env)
    r["cmd"] = " ".join(cli + args)
    if r["rc"] != 0:
        why = r["killed"] or f"exit {r['rc']}: {_last_line(r['stderr'])}"
        if with_cp and "no such option" in r["stderr"].lower() and "critical" in r["stderr"].lower():
            why = "this charllm-trace has no --critical-path option yet (" + why + ")"
        r.update(ok=False, why=why)
        return r
    r["ok"] = True
    out = Path(r["out_path"])
    r["out_mb"] = out.stat().st_size / 1e6
    if with_cp:
        note = subprocess.run(
            [sys.executable, __file__, "--inspect", str(out)], capture_output=True, text=True
        )
        r["note"] = note.stdout.strip() or _last_line(note.stderr)
    return r


def build_profile(reps: int, path: Path) -> int:
    """``bench_analyze.make_trace`` in its own process (it holds ~0.5 GiB while writing)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from bench_analyze import make_trace; "
        "print(make_trace(int(sys.argv[2]), __import__('pathlib').Path(sys.argv[3])))"
    )
    made = subprocess.run(
        [sys.executable, "-c", code, str(HERE), str(reps), str(path)],
        check=True, cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    return int(made.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--profile", type=Path, default=None, help="reuse this Kineto JSON instead of building one"
    )
    ap.add_argument(
        "--reps",
        default="25",
        help="comma-separated copies of the A100 profile to build (25 -> ~1.0 M events)",
    )
    ap.add_argument("--tools", default="ours,hta", help="comma-separated: ours, ours-base, hta")
    ap.add_argument(
        "--hta-python", default=None, help="interpreter with holistictraceanalysis 0.5.0 and pandas<3"
    )
    ap.add_argument(
        "--hta-window",
        choices=["all", "steps"],
        default="all",
        help='all: annotation="" (whole trace); steps: every ProfilerStep, instance_id=(0, n-1)',
    )
    ap.add_argument(
        "--hta-drop-last-step",
        action="store_true",
        help="HTA's default include_last_profiler_step=False (drops the last step at load)",
    )
    ap.add_argument(
        "--cli", default=None, help="charllm-trace command (default: beside this python, else PATH)"
    )
    ap.add_argument("--ours-args", default="", help="extra arguments for ours, e.g. '--hta-compat'")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds, ours")
    ap.add_argument("--hta-timeout", type=float, default=1800.0, help="seconds, HTA")
    ap.add_argument("--mem-limit-gib", type=float, default=16.0)
    ap.add_argument(
        "--workdir", default=None, help="where built profiles and outputs go (default: a temp dir)"
    )
    ap.add_argument("--keep", action="store_true", help="keep built profiles and outputs")
    ap.add_argument("--child", nargs=3, metavar=("PATH", "WINDOW", "KEEP_LAST"), help=argparse.SUPPRESS)
    ap.add_argument("--count", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--inspect", metavar="PATH", help=argparse.SUPPRESS)
    a = ap.parse_args()  # fmt: skip
    if a.child:
        _child_main(a.child)
        return
    if a.count:
        _count_main(a.count)
        return
    if a.inspect:
        _inspect_main(a.inspect)
        return

    tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    bad = set(tools) - {"ours", "ours-base", "hta"}
    if bad:
        sys.exit(f"unknown tool(s): {', '.join(sorted(bad))}")
    if "hta" in tools and not a.hta_python:
        print("# hta: skipped (give --hta-python PATH: a venv with holistictraceanalysis==0.5.0, pandas<3)")
        tools.remove("hta")
    if a.hta_python and not Path(a.hta_python).exists():
        sys.exit(f"--hta-python {a.hta_python}: no such file")
    cli = a.cli.split() if a.cli else default_cli()
    cp_args, base_args, how = ours_args(cli) if {"ours", "ours-base"} & set(tools) else ([], [], "")
    if how:
        print(f"# ours: {' '.join(cli + cp_args).format(profile='PROFILE')}   [critical path: {how}]")
        if "ours-base" in tools:
            print(f"# ours-base: {' '.join(cli + base_args).format(profile='PROFILE')}")

    work = Path(a.workdir or tempfile.mkdtemp(prefix="charllm-cp-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    keep = a.keep
    try:
        if a.profile is not None:
            if not a.profile.exists():
                sys.exit(f"--profile {a.profile}: no such file")
            sizes = [(None, a.profile.resolve(), count_events(a.profile))]
        else:
            sizes = []
            for reps in [int(x) for x in a.reps.split(",")]:
                sizes.append((reps, work / f"a100x{reps}.json", None))
        for reps, path, n in sizes:
            if reps is not None:
                n = build_profile(reps, path)
                os.sync()  # the write-back must not overlap the first timed run
            mb = path.stat().st_size / 1e6
            label = f"{reps} copies" if reps is not None else str(path)
            nstr = f"{n:,}" if n is not None else "?"
            print(f"# {label}: {nstr} events, {mb:.0f} MB JSON", flush=True)
            results: dict[str, dict] = {}
            for tool in tools:
                sub = work / f"out-{tool}-{reps if reps is not None else 'profile'}"
                sub.mkdir(exist_ok=True)
                load_avg = os.getloadavg()[0]
                if tool == "hta":
                    r = run_hta(a.hta_python, path, sub, a)
                else:
                    with_cp = tool == "ours"
                    r = run_ours(cli, path, sub, a, cp_args if with_cp else base_args, with_cp)
                results[tool] = r
                head = f"{tool:9s} events={nstr:>9} wall={r['wall_s']:8.2f}s"
                if not r["ok"]:
                    print(f"{head} FAILED: {r['why']}", flush=True)
                    continue
                line = (f"{head} peak_rss={r['ru_maxrss_mib']:7.0f}MiB cpu={r['cpu_s']:7.1f}s "
                        f"parent_hwm={self_hwm_mib():.0f}MiB loadavg={load_avg:.1f}")  # fmt: skip
                if tool == "hta":
                    line += (f" | start-up={r['startup_s']:.2f}s import={r['import_s']:.2f}s "
                             f"load={r['load_s']:.2f}s cp={r['cp_s']:.2f}s "
                             f"breakdown={r.get('breakdown_s', 0):.2f}s exit={r['teardown_s']:.2f}s self_VmHWM={r['peak_rss_mib']:.0f}MiB "
                             f"graph={r['graph_nodes']:,}n/{r['graph_edges']:,}e "
                             f"cp_length={r.get('cp_length_us', 0):,}us success={r['success']} "
                             f"summary%={ {k: round(v, 1) for k, v in r.get('summary_pct', {}).items()} }")  # fmt: skip
                else:
                    line += f" | out={r['out_mb']:.1f}MB polled_VmHWM={r['polled_hwm_mib']:.0f}MiB"
                    if r.get("note"):
                        line += f" | {r['note']}"
                print(line, flush=True)
            h, o = results.get("hta"), results.get("ours")
            if h and o and h["ok"] and o["ok"]:
                print(f"ratio events={nstr}: HTA/ours wall {h['wall_s'] / o['wall_s']:.1f}x, "
                      f"ours/HTA peak RSS {o['ru_maxrss_mib'] / h['ru_maxrss_mib']:.2f}", flush=True)  # fmt: skip
            b = results.get("ours-base")
            if b and o and b["ok"] and o["ok"]:
                print(f"critical path cost in ours: {o['wall_s'] - b['wall_s']:+.2f}s wall, "
                      f"{o['ru_maxrss_mib'] - b['ru_maxrss_mib']:+.0f}MiB peak RSS", flush=True)  # fmt: skip
            if reps is not None and not keep:
                path.unlink(missing_ok=True)
    finally:
        if not keep and a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
        elif not keep:
            for sub in work.glob("out-*"):
                if sub.is_dir():
                    shutil.rmtree(sub, ignore_errors=True)


if __name__ == "__main__":
    main()
