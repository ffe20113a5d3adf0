"""Analyses vs Holistic Trace Analysis 0.5.0 on the same Kineto input.

Builds a large Kineto trace by repeating the A100 DDP profile
(``../shared/traces/hta/a100_ddp_nccl_rank0.json.gz``, 40,573 events) N times, shifted
in time, with correlation / External / flow ids and ProfilerStep numbers offset so the
copies stay distinct. Then, each in its own fresh subprocess (wall time measured by the
parent, peak RSS by the child (its ``VmHWM``, see ``peak_rss_mib``); a watchdog kills a child above
``--mem-limit-gib``):

- ours: ``charllm_trace.load`` (Kineto -> model) + overlap + bandwidth (+ the temporal
  breakdown, which is part of the overlap result: compute / comm / memcpy / idle);
- ours-et (optional): the same analyses on the Chakra ET that ``charllm-trace convert``
  wrote from that Kineto file (the conversion is timed and printed as a one-off);
- HTA: ``TraceAnalysis(trace_dir=...)`` (load) + ``get_comm_comp_overlap`` +
  ``get_temporal_breakdown``;
- ours-untuned (optional): "ours" with polars' allocator (jemalloc) left at its defaults
  (``CHARLLM_TRACE_ALLOC=default``): freed pages kept up to 10 s instead of the 100 ms that
  ``import charllm_trace`` asks for (``charllm_trace/core/alloc.py``); the same code otherwise.

Usage::

    python benchmarks/bench_analyze.py --reps 25            # ~1.0 M events
    python benchmarks/bench_analyze.py --reps 5,10,25 --hta-timeout 900
    python benchmarks/bench_analyze.py --source v100 --reps 263 --gzip   # ~865 k events, .json.gz

Prints one line per (tool, size) and a ratio line per size. Trace files go to a
temporary directory (``--workdir``) and are removed afterwards.
"""

from __future__ import annotations

import argparse
import gzip
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

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("CHARLLM_SHARED", ROOT.parent / "shared")) / "traces"
#: source profiles (``--source``): the A100 DDP profile (relative-µs timestamps, 21 NCCL kernels)
#: and rank 0 of the V100 DLRM run (absolute-µs timestamps, 8 NCCL kernels with collective args)
SOURCES = {
    "a100": SHARED / "hta" / "a100_ddp_nccl_rank0.json.gz",
    "v100": SHARED / "param" / "dlrm_8ranks_v100" / "kineto_rank0.json.gz",
}
SOURCE = SOURCES["a100"]
ID_ARGS = ("correlation", "External id", "Record function id", "Ev Idx")
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
#: environment of the ours-untuned run: polars' allocator at its own defaults
UNTUNED_ENV = {"CHARLLM_TRACE_ALLOC": "default"}


def make_trace(reps: int, out: Path, source: Path = SOURCE) -> int:
    """Write a Kineto JSON with ``reps`` copies of the ``source`` profile (gzip'd when ``out`` ends
    in ``.gz``, level 6 as the gzip command); returns the event count."""
    doc = json.loads(gzip.open(source).read())
    events = doc["traceEvents"]
    timed = [e for e in events if e.get("ph") in ("X", "s", "f", "i", "C") and "ts" in e]
    timed_ids = {id(e) for e in timed}  # by identity: `e not in timed` is quadratic (111 k events: hours)
    other = [e for e in events if id(e) not in timed_ids] if len(timed) != len(events) else []
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0) or 0) for e in timed)
    shift_us = int(t1 - t0) + 1000  # whole µs: keeps the 3 decimals exact
    max_id = 0
    for e in timed:
        a = e.get("args") or {}
        for k in ID_ARGS:
            v = a.get(k)
            if isinstance(v, int):
                max_id = max(max_id, v)
        if isinstance(e.get("id"), int):
            max_id = max(max_id, e["id"])
    id_step = max_id + 1
    steps = [int(m.group(1)) for e in timed if (m := STEP_RE.match(e.get("name", "")))]
    step_step = (max(steps) - min(steps) + 1) if steps else 0
    out_events = list(other)
    for k in range(reps):
        for e in timed:
            c = dict(e)
            c["ts"] = e["ts"] + k * shift_us
            if k:
                a = e.get("args")
                if a:
                    a = dict(a)
                    for key in ID_ARGS:
                        if isinstance(a.get(key), int) and a[key] >= 0:
                            a[key] += k * id_step
                    c["args"] = a
                if isinstance(e.get("id"), int):
                    c["id"] = e["id"] + k * id_step
                m = STEP_RE.match(e.get("name", ""))
                if m:
                    c["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_step}"
            out_events.append(c)
    doc["traceEvents"] = out_events
    with gzip.open(out, "wt", compresslevel=6) if out.suffix == ".gz" else open(out, "w") as f:
        json.dump(doc, f)
    return len(out_events)


# ---------------------------------------------------------------- children


def child_ours(path: str) -> dict:
    import charllm_trace as ct

    ct.tune_polars_allocator()  # as the charllm-trace command does (opt-in for library users)
    from charllm_trace.analysis.api import bandwidth, overlap
    from charllm_trace.analysis.context import RankContext

    t = time.perf_counter()
    run = ct.load(path, cache=False)
    tr = run.traces[run.ranks[0]]
    t_load = time.perf_counter() - t
    rss_load = peak_rss_mib()
    ctx = RankContext.of(tr)  # classified once, for both
    ov = overlap(ctx, hta_compat=True)
    bw = bandwidth(tr, contexts={run.ranks[0]: ctx})
    total = ov.total().row(0, named=True)
    return {
        "load_s": t_load,
        "analyze_s": time.perf_counter() - t - t_load,
        "overlap_pct": total["overlap_pct"],
        "idle_ns": total["idle_ns"],
        "n_collectives": bw.collectives.height,
        "peak_rss_after_load_mib": rss_load,
        "n_nodes": tr.nodes.height,
    }


def child_hta(path: str) -> dict:
    import logging

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    d = tempfile.mkdtemp(prefix="hta-bench-")
    # HTA decompresses by the name: keep ".json.gz"
    name = "rank-0.json.gz" if str(path).endswith(".gz") else "rank-0.json"
    os.symlink(os.path.abspath(path), os.path.join(d, name))
    t = time.perf_counter()
    ta = TraceAnalysis(trace_dir=d)
    t_load = time.perf_counter() - t
    rss_load = peak_rss_mib()
    ov = ta.get_comm_comp_overlap(visualize=False)
    br = ta.get_temporal_breakdown(visualize=False)
    shutil.rmtree(d)
    return {
        "load_s": t_load,
        "analyze_s": time.perf_counter() - t - t_load,
        "overlap_pct": float(ov["comp_comm_overlap_pctg"].iloc[0]),
        "idle_ns": float(br["idle_time(us)"].iloc[0]) * 1000 if "idle_time(us)" in br else None,
        "peak_rss_after_load_mib": rss_load,
    }


def peak_rss_mib() -> float:
    """This program's peak resident memory (MiB): ``VmHWM`` where Linux has it.

    Not ``ru_maxrss``: Linux carries it across ``exec``, so a child started by a big parent
    reports at least the parent's resident size at the fork (the 1 M-event trace writer here
    holds ~550 MiB). ``VmHWM`` belongs to the address space the child's own program made."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child_main(tool: str, path: str) -> None:
    res = child_hta(path) if tool == "hta" else child_ours(path)
    res["peak_rss_mib"] = peak_rss_mib()
    print("RESULT " + json.dumps(res), flush=True)


# ---------------------------------------------------------------- parent


def run_child(tool: str, path: Path, timeout: float, mem_limit_gib: float) -> dict:
    import psutil

    t = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, __file__, "--child", tool, str(path)],
        env={**os.environ, **UNTUNED_ENV} if tool == "ours-untuned" else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    killed: list[str] = []

    def watch() -> None:
        try:
            proc = psutil.Process(p.pid)
            while p.poll() is None:
                rss = sum(c.memory_info().rss for c in [proc, *proc.children(recursive=True)])
                if rss > mem_limit_gib * 2**30:
                    killed.append(f"killed above {mem_limit_gib} GiB RSS")
                    p.kill()
                    return
                if time.perf_counter() - t > timeout:
                    killed.append(f"killed after {timeout:.0f} s")
                    p.kill()
                    return
                time.sleep(0.2)
        except psutil.NoSuchProcess:
            return

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    out, err = p.communicate()
    wall = time.perf_counter() - t
    w.join(1)
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        why = (
            killed[0]
            if killed
            else f"exit {p.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}"
        )
        return {"ok": False, "wall_s": wall, "why": why}
    res = json.loads(line[len("RESULT ") :])
    res.update(ok=True, wall_s=wall)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", default="25", help="comma-separated repetition counts (25 -> ~1.0 M events)")
    ap.add_argument(
        "--tools", default="ours,hta", help="ours, hta, ours-et (convert once, analyse the ET), ours-untuned"
    )
    ap.add_argument("--hta-timeout", type=float, default=1200.0)
    ap.add_argument("--mem-limit-gib", type=float, default=6.0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the trace files in --workdir")
    ap.add_argument("--child", nargs=2, metavar=("TOOL", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--source", choices=sorted(SOURCES), default="a100", help="profile to repeat")
    ap.add_argument("--gzip", action="store_true", help="write the repeated profile gzip'd (.json.gz)")
    ap.add_argument("--make", nargs=2, metavar=("REPS", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child_main(*a.child)
        return
    if a.make:
        print(make_trace(int(a.make[0]), Path(a.make[1]), SOURCES[a.source]))
        return
    source = SOURCES[a.source]
    if not source.exists():
        sys.exit(f"source trace {source} not found (set CHARLLM_SHARED)")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="charllm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for reps in [int(x) for x in a.reps.split(",")]:
            path = work / f"{a.source}x{reps}.json{'.gz' if a.gzip else ''}"
            count = path.with_name(path.name + ".events")
            if a.keep and path.exists() and count.exists():  # made by an earlier --keep run
                n = int(count.read_text())
            else:
                made = subprocess.run(
                    [sys.executable, __file__, "--source", a.source, "--make", str(reps), str(path)],
                    check=True, cwd=ROOT, capture_output=True, text=True,
                )  # fmt: skip
                n = int(made.stdout.split()[-1])
                count.write_text(str(n))
            os.sync()  # the file's write-back must not overlap the first tool's timed run
            mb = path.stat().st_size / 1e6
            what = "gzip'd JSON" if a.gzip else "JSON"
            print(f"# {a.source} x {reps} copies: {n:,} events, {mb:.0f} MB {what}", flush=True)
            results = {}
            for tool in a.tools.split(","):
                timeout = a.hta_timeout if tool == "hta" else 600.0
                target = path
                if tool == "ours-et":  # convert once to Chakra ET, then analyse the ET
                    etdir = work / f"et{reps}"
                    t = time.perf_counter()
                    subprocess.run(
                        [sys.executable, "-m", "charllm_trace.cli.app", "convert", str(path), "-o", str(etdir),
                         "--force"],
                        check=True, cwd=ROOT, capture_output=True,
                    )  # fmt: skip
                    print(
                        f"# convert to Chakra ET (one-off): {time.perf_counter() - t:.2f}s wall", flush=True
                    )
                    target = next(etdir.glob("*.et"))
                load_avg = os.getloadavg()[0]
                r = run_child(tool, target, timeout, a.mem_limit_gib)
                results[tool] = r
                if r["ok"]:
                    print(
                        f"{tool:11s} events={n:>9,} wall={r['wall_s']:7.2f}s load={r['load_s']:7.2f}s "
                        f"analyze={r['analyze_s']:6.2f}s peak_rss={r['peak_rss_mib']:7.0f}MiB "
                        f"(after load {r['peak_rss_after_load_mib']:.0f}MiB) "
                        f"overlap={r['overlap_pct']:.2f}% loadavg={load_avg:.1f}",
                        flush=True,
                    )
                else:
                    print(
                        f"{tool:11s} events={n:>9,} FAILED after {r['wall_s']:.1f}s: {r['why']}", flush=True
                    )
            h = results.get("hta")
            for name in ("ours", "ours-untuned"):
                o = results.get(name)
                if o and h and o["ok"] and h["ok"]:
                    print(
                        f"ratio events={n:,}: HTA/{name} wall {h['wall_s'] / o['wall_s']:.1f}x, "
                        f"{name}/HTA peak RSS {o['peak_rss_mib'] / h['peak_rss_mib']:.2f}",
                        flush=True,
                    )
            if not a.keep:
                path.unlink()
                count.unlink()
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
