"""What the time breakdown (issue 13 item 1) adds to ``analyze`` on a ~1 M-event Kineto profile.

The profile is ``bench_analyze.make_trace``'s: the A100 DDP profile
(``../shared/traces/hta/a100_ddp_nccl_rank0.json.gz``, 40,573 events) repeated ``--reps`` times,
shifted in time with ids and ProfilerStep numbers offset (25 copies = 1,013,413 events).

In one fresh process per run: load (Kineto -> model, no cache), then, alternating, ``--repeat``
times each:

- ``analyze``: ``analyze_run`` as ``charllm-trace analyze --per-step`` runs it (critical path on),
  and ``analyze-nocp``: the same with ``--no-critical-path``; both include the breakdown;
- ``breakdown``: ``run_breakdown`` alone on the same classified nodes (what ``analyze_run`` does
  for it), per step.

Printed: the best time of each, and the breakdown's share: breakdown / (analyze - breakdown),
i.e. what it adds to ``analyze`` without it (target: at most 20 %).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_breakdown.py                # 25 copies, ~1.0 M events
    .venv/bin/python benchmarks/bench_breakdown.py --profile /tmp/a100x25.json --repeat 3
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analyze import SOURCE, make_trace, peak_rss_mib  # noqa: E402


def child(path: str, repeat: int) -> dict:
    import charllm_trace as ct
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.analysis.breakdown import run_breakdown
    from charllm_trace.analysis.context import RankContext

    t = time.perf_counter()
    run = ct.load(path, cache=False)
    out: dict = {"load_s": time.perf_counter() - t, "nodes": sum(tr.nodes.height for tr in run)}
    contexts = {r: RankContext.of(tr) for r, tr in run.traces.items()}
    times: dict[str, list[float]] = {"analyze": [], "analyze-nocp": [], "breakdown": []}
    for _ in range(repeat):
        for mode in times:
            t = time.perf_counter()
            if mode == "breakdown":
                bd = run_breakdown(contexts, per_step=True)
                assert bd is not None
                out["breakdown_rows"] = bd.by.height
            else:
                analyze_run(run, AnalyzeOptions(per_step=True, critical_path=mode == "analyze"))
            times[mode].append(time.perf_counter() - t)
    out["times"] = times
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=25, help="copies of the A100 profile (25: ~1.0 M events)")
    ap.add_argument("--profile", default=None, help="use this Kineto JSON instead of building one")
    ap.add_argument("--repeat", type=int, default=3, help="timings of each mode in the process")
    ap.add_argument("--runs", type=int, default=2, help="fresh processes")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.repeat)))
        return
    tmp = None
    path = a.profile
    if path is None:
        tmp = tempfile.mkdtemp(prefix="bench-breakdown-")
        path = os.path.join(tmp, f"a100x{a.reps}.json")
        n = make_trace(a.reps, Path(path), SOURCE)
        print(f"profile: {path}, {n:,} events")
    try:
        for i in range(a.runs):
            env = {**os.environ, "CHARLLM_TRACE_NO_CACHE": "1"}
            p = subprocess.run(
                [sys.executable, __file__, "--child", path, "--repeat", str(a.repeat)],
                capture_output=True, text=True, env=env, check=True,
            )  # fmt: skip
            res = json.loads(p.stdout.strip().splitlines()[-1])
            best = {k: min(v) for k, v in res["times"].items()}
            print(
                f"run {i + 1}: {res['nodes']:,} nodes, load {res['load_s']:.2f} s, peak {res['peak_rss_mib']:.0f} MiB; "
                + ", ".join(
                    f"{k} {v:.3f} s (of {', '.join(f'{x:.3f}' for x in res['times'][k])})"
                    for k, v in best.items()
                )
            )
            for mode in ("analyze", "analyze-nocp"):
                without = best[mode] - best["breakdown"]
                print(
                    f"  breakdown adds {100 * best['breakdown'] / without:.1f} % to {mode} ({without:.3f} s without it)"
                )
    finally:
        if tmp:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
