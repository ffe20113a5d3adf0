"""Execution graph, critical path and what-if replay on a ~1 M-event Kineto profile (issue 10).

The profile is ``bench_analyze.make_trace``'s: the A100 DDP profile
(``../shared/traces/hta/a100_ddp_nccl_rank0.json.gz``, 40,573 events) repeated ``--reps`` times,
shifted in time with ids and ProfilerStep numbers offset (25 copies = 1,013,413 events).

Each measurement runs in its own fresh process (peak memory is that process's ``VmHWM``):

- ``graph``: load (Kineto -> model), classify, then, each timed on its own:
  ``build_run_graph`` (the calibrated point graph: lanes, launches, syncs, data edges),
  ``critical_path`` (re-timing + a path per step and for the whole trace), ``what_if`` (a
  replay with ``--factors``: re-timing with scaled lags + the overlap analysis of the measured
  and the re-timed trace) and, for reference, one bare re-timing (``retime``: the C kernel);
- ``analyze-cp`` / ``analyze-nocp``: ``analyze_run`` as ``charllm-trace analyze`` runs it,
  with and without the critical path (``AnalyzeOptions(critical_path=...)``); the ratio of
  their peak memory is what the critical path costs in memory;
- ``analyze-whatif``: ``analyze_run`` with the critical path and a what-if replay.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_graph.py                 # 25 copies, ~1.0 M events
    .venv/bin/python benchmarks/bench_graph.py --reps 5 --repeat 3
    .venv/bin/python benchmarks/bench_graph.py --profile /tmp/a100x25.json   # reuse a profile

Prints one line per (mode, run) and a summary: best wall time per phase, peak RSS, and the
peak-memory ratio of ``analyze`` with / without the critical path. Targets (issue 10): graph +
critical path a few seconds at 1 M events, replay under 10 s, peak memory within 1.5x of
``analyze`` without the critical path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analyze import SOURCE, make_trace, peak_rss_mib  # noqa: E402

MODES = ("graph", "analyze-nocp", "analyze-cp", "analyze-whatif")


def _factors(text: str) -> dict[str, float]:
    from charllm_trace.analysis.whatif import parse_what_if

    return parse_what_if(text)


def child_graph(path: str, factors: str) -> dict:
    import charllm_trace as ct
    from charllm_trace.analysis.critical import critical_path, retime
    from charllm_trace.analysis.whatif import factor_array, what_if
    from charllm_trace.core.classify import classify
    from charllm_trace.graph.run import build_run_graph

    out: dict = {}
    t = time.perf_counter()
    run = ct.load(path, cache=False)
    out["load_s"] = time.perf_counter() - t
    out["rss_after_load_mib"] = peak_rss_mib()
    t = time.perf_counter()
    classified = {r: classify(tr.nodes) for r, tr in run.traces.items()}
    out["classify_s"] = time.perf_counter() - t
    t = time.perf_counter()
    rg = build_run_graph(run, classified)
    out["build_s"] = time.perf_counter() - t
    out["rss_after_build_mib"] = peak_rss_mib()
    t = time.perf_counter()
    cp = critical_path(run, graph=rg)
    out["critical_path_s"] = time.perf_counter() - t
    t = time.perf_counter()
    retime(rg, factor_array(_factors(factors)))
    out["retime_s"] = time.perf_counter() - t
    t = time.perf_counter()
    wi = what_if(run, _factors(factors), graph=rg)
    out["what_if_s"] = time.perf_counter() - t
    whole = cp.paths.filter(cp.paths["step"].is_null()).row(0, named=True)
    wrow = wi.steps.filter(wi.steps["step"].is_null()).row(0, named=True)
    out.update(
        n_nodes=sum(tr.nodes.height for tr in run.traces.values()),
        n_points=int(rg.g.n_points),
        n_edges=len(rg.g.src),
        n_paths=cp.paths.height,
        whole_length_ms=whole["length_ns"] / 1e6,
        whole_span_ms=whole["span_ns"] / 1e6,
        measured_ms=wrow["measured_ns"] / 1e6,
        predicted_ms=wrow["predicted_ns"] / 1e6,
    )
    return out


def child_analyze(path: str, mode: str, factors: str) -> dict:
    import charllm_trace as ct
    from charllm_trace.analysis import analyze_run
    from charllm_trace.analysis.results import AnalyzeOptions

    t = time.perf_counter()
    run = ct.load(path, cache=False)
    load_s = time.perf_counter() - t
    opts = AnalyzeOptions(
        per_step=True,
        critical_path=mode != "analyze-nocp",
        what_if=_factors(factors) if mode == "analyze-whatif" else None,
    )
    t = time.perf_counter()
    res = analyze_run(run, opts)
    return {
        "load_s": load_s,
        "analyze_s": time.perf_counter() - t,
        "has_cp": res.critical_path is not None,
        "has_what_if": res.what_if is not None,
    }


def _child_main(mode: str, path: str, factors: str) -> None:
    res = child_graph(path, factors) if mode == "graph" else child_analyze(path, mode, factors)
    res["peak_rss_mib"] = peak_rss_mib()
    print("RESULT " + json.dumps(res), flush=True)


def run_child(mode: str, path: Path, factors: str, timeout: float) -> dict:
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path), factors],
        capture_output=True, text=True, cwd=ROOT, timeout=timeout,
    )  # fmt: skip
    wall = time.perf_counter() - t
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        tail = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        return {"ok": False, "wall_s": wall, "why": f"exit {p.returncode}: {tail}"}
    res = json.loads(line[len("RESULT ") :])
    res.update(ok=True, wall_s=wall)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=25, help="copies of the A100 profile (25 -> ~1.0 M events)")
    ap.add_argument("--profile", default=None, help="use this Kineto JSON instead of building one")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--factors", default="comm=0.5,gemm=0.8,launch=0", help="the what-if replay's factors")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each mode (alternating)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--child", nargs=3, metavar=("MODE", "PATH", "FACTORS"), help=argparse.SUPPRESS)
    ap.add_argument("--make", nargs=2, metavar=("REPS", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child_main(*a.child)
        return
    if a.make:
        print(make_trace(int(a.make[0]), Path(a.make[1])))
        return
    work = Path(a.workdir or tempfile.mkdtemp(prefix="charllm-bench-graph-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if a.profile:
            path = Path(a.profile)
            print(f"# profile {path}: {path.stat().st_size / 1e6:.0f} MB JSON", flush=True)
        else:
            if not SOURCE.exists():
                sys.exit(f"source trace {SOURCE} not found (set CHARLLM_SHARED)")
            path = work / f"a100x{a.reps}.json"
            made = subprocess.run(
                [sys.executable, __file__, "--make", str(a.reps), str(path)],
                check=True, cwd=ROOT, capture_output=True, text=True,
            )  # fmt: skip
            n = int(made.stdout.split()[-1])
            os.sync()
            print(f"# {a.reps} copies: {n:,} events, {path.stat().st_size / 1e6:.0f} MB JSON", flush=True)
        modes = [m for m in a.modes.split(",") if m]
        results: dict[str, list[dict]] = {m: [] for m in modes}
        for _ in range(a.repeat):
            for mode in modes:
                load_avg = os.getloadavg()[0]
                r = run_child(mode, path, a.factors, a.timeout)
                results[mode].append(r)
                if not r["ok"]:
                    print(f"{mode:14s} FAILED after {r['wall_s']:.1f}s: {r['why']}", flush=True)
                    continue
                if mode == "graph":
                    print(
                        f"{mode:14s} nodes={r['n_nodes']:,} points={r['n_points']:,} edges={r['n_edges']:,} "
                        f"load={r['load_s']:.2f}s classify={r['classify_s']:.2f}s build={r['build_s']:.2f}s "
                        f"critical_path={r['critical_path_s']:.2f}s retime={r['retime_s']:.2f}s "
                        f"what_if={r['what_if_s']:.2f}s process={r['wall_s']:.2f}s "
                        f"peak_rss={r['peak_rss_mib']:.0f}MiB (after load {r['rss_after_load_mib']:.0f}, "
                        f"after build {r['rss_after_build_mib']:.0f}) loadavg={load_avg:.1f}",
                        flush=True,
                    )
                    print(
                        f"{'':14s} whole trace: path {r['whole_length_ms']:.1f} of span {r['whole_span_ms']:.1f} ms; "
                        f"what-if {a.factors}: {r['measured_ms']:.1f} -> {r['predicted_ms']:.1f} ms (predicted)",
                        flush=True,
                    )
                else:
                    print(
                        f"{mode:14s} load={r['load_s']:.2f}s analyze={r['analyze_s']:.2f}s "
                        f"process={r['wall_s']:.2f}s peak_rss={r['peak_rss_mib']:.0f}MiB loadavg={load_avg:.1f}",
                        flush=True,
                    )
        ok = {m: [r for r in rs if r["ok"]] for m, rs in results.items()}
        g = ok.get("graph") or []
        if g:
            best = {k: min(r[k] for r in g) for k in ("build_s", "critical_path_s", "what_if_s", "retime_s")}
            print(
                f"summary graph: build {best['build_s']:.2f}s + critical path {best['critical_path_s']:.2f}s = "
                f"{best['build_s'] + best['critical_path_s']:.2f}s; what-if replay {best['what_if_s']:.2f}s "
                f"(bare re-timing {best['retime_s']:.2f}s); peak RSS {min(r['peak_rss_mib'] for r in g):.0f} MiB",
                flush=True,
            )
        cp, nocp = ok.get("analyze-cp") or [], ok.get("analyze-nocp") or []
        if cp and nocp:
            a_cp = min(r["peak_rss_mib"] for r in cp)
            a_no = min(r["peak_rss_mib"] for r in nocp)
            print(
                f"summary analyze: peak RSS {a_cp:.0f} MiB with the critical path, {a_no:.0f} MiB without: "
                f"{a_cp / a_no:.2f}x; analyze time {min(r['analyze_s'] for r in cp):.2f}s vs "
                f"{min(r['analyze_s'] for r in nocp):.2f}s",
                flush=True,
            )
        wi = ok.get("analyze-whatif") or []
        if wi and nocp:
            a_wi = min(r["peak_rss_mib"] for r in wi)
            print(
                f"summary analyze + what-if: peak RSS {a_wi:.0f} MiB ({a_wi / min(r['peak_rss_mib'] for r in nocp):.2f}x "
                f"analyze without the critical path), analyze time {min(r['analyze_s'] for r in wi):.2f}s",
                flush=True,
            )
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
