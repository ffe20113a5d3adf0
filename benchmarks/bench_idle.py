"""What the idle-time breakdown per stream and the launch statistics add to ``analyze``
(issue 13 item 2: at most 20 %).

Builds the A100 DDP profile repeated N times (``bench_analyze.make_trace``; 25 copies: ~1 M
events) unless ``--profile`` names one, then, each in a fresh process, alternating: load, then
``analyze_run(run, AnalyzeOptions(per_step=True))`` as ``charllm-trace analyze --per-step`` runs it
(critical path on), once with the per-stream analyses (``on``) and once with
``analysis.api.stream_analyses`` replaced by a stub that computes nothing (``off``); ``on`` also
times ``stream_analyses`` alone, again. Wall and CPU time (``process_time``: all threads of the
process; steadier than wall time on a shared machine). Prints one JSON line per run.

Usage::

    python benchmarks/bench_idle.py --reps 25 --rounds 3
    python benchmarks/bench_idle.py --profile a100x25.json --rounds 3
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

ROOT = Path(__file__).resolve().parent.parent


def child(path: str, mode: str) -> dict:
    import charllm_trace as ct

    ct.tune_polars_allocator()
    from charllm_trace.analysis import api
    from charllm_trace.analysis.results import AnalyzeOptions
    from charllm_trace.analysis.stream_analyses import stream_analyses

    t = time.perf_counter()
    run = ct.load(path, cache=False)
    t_load = time.perf_counter() - t
    if mode == "off":
        api.stream_analyses = lambda *a, **k: (None, None, "off")  # type: ignore[assignment]
    opts = AnalyzeOptions(per_step=True)
    t, c = time.perf_counter(), time.process_time()
    res = api.analyze_run(run, opts)
    t_an, c_an = time.perf_counter() - t, time.process_time() - c
    out = {
        "mode": mode,
        "load_s": round(t_load, 3),
        "analyze_s": round(t_an, 3),
        "analyze_cpu_s": round(c_an, 3),
    }
    if mode == "on":
        assert res.idle_time is not None and res.launch is not None
        t, c = time.perf_counter(), time.process_time()
        stream_analyses(run.traces, res.classified, opts)
        out["stream_analyses_s"] = round(time.perf_counter() - t, 3)
        out["stream_analyses_cpu_s"] = round(time.process_time() - c, 3)
        out["n_idle_rows"] = res.idle_time.streams.height
        out["n_launch_rows"] = res.launch.stats.height
    out["nodes"] = sum(tr.nodes.height for tr in run.traces.values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--profile", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("PATH", "MODE"))
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    tmp = None
    path = a.profile
    if path is None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_analyze import make_trace

        tmp = tempfile.mkdtemp(prefix="bench-idle-")
        path = Path(tmp) / f"a100x{a.reps}.json"
        n = make_trace(a.reps, path)
        print(json.dumps({"profile": str(path), "events": n}), flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        for _ in range(a.rounds):
            for mode in ("on", "off"):
                load = os.getloadavg()[0]
                t = time.perf_counter()
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(path), mode],
                    capture_output=True, text=True, env=env, check=True,
                )  # fmt: skip
                rec = json.loads(out.stdout.strip().splitlines()[-1])
                rec.update(process_s=round(time.perf_counter() - t, 3), load=round(load, 2))
                print(json.dumps(rec), flush=True)
    finally:
        if tmp:
            for p in Path(tmp).iterdir():
                p.unlink()
            os.rmdir(tmp)


if __name__ == "__main__":
    main()
