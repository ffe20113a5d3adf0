"""HTA 0.5.0's idle-time breakdown and kernel launch statistics on the shared traces: the
reference figures of ``tests/analysis/test_analysis_idle.py`` and docs/analyses.md ("Idle time per GPU
stream", "Launch statistics").

Needs Holistic Trace Analysis 0.5.0 (not a dependency of charllm-trace; never run by the tests)::

    python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install "pandas<3" numpy \
        && /tmp/htavenv/bin/pip install --no-deps holistictraceanalysis==0.5.0 \
        && /tmp/htavenv/bin/pip install plotly psutil networkx pydot pyyaml
    /tmp/htavenv/bin/python benchmarks/hta_idle_reference.py [../shared/traces] > hta_idle.json

For each profile HTA loads: ``get_idle_time_breakdown(ranks, visualize=False)`` (default
``consecutive_kernel_delay=30``, in the trace's time unit: µs) with HTA's default kernel filter
(kernels launched after the last ProfilerStep began dropped) and with
``include_last_profiler_step=True``; and ``get_cuda_kernel_launch_stats(ranks,
visualize=False)``: the number of launches, how many GPU ops are shorter than their launch call
(``gpu_duration < cpu_duration``) and HTA's launch delay (call end -> kernel start, clipped at 0)
percentiles. Times in µs as HTA reports them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

SHARED = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "traces")

#: name -> (path, ranks): a single file is linked into a directory as rank-0
PROFILES = {
    "a100": ("hta/a100_ddp_nccl_rank0.json.gz", [0]),
    "mi250": ("hta/mi250_minitoy_kineto.json.gz", [0]),
    "trace_filter_2ranks": ("hta/trace_filter_2ranks", [0, 1]),
    "h100_inference": ("tracelens/h100_qwen1.5-0.5b_inference.json.gz", [0]),
    "mi300_inference": ("tracelens/mi300_qwen1.5-0.5b_inference.json.gz", [0]),
    "resnet": ("param/resnet_kineto.json.gz", [0]),
}


def _dir_of(p: Path) -> str:
    if p.is_dir():
        return str(p)
    d = tempfile.mkdtemp(prefix="hta-idle-")
    os.symlink(p.resolve(), os.path.join(d, "rank-0.json.gz"))  # HTA decompresses by the name
    return d


def one(path: Path, ranks: list[int], keep_last: bool) -> dict:
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=_dir_of(path), include_last_profiler_step=keep_last)
    ranks = [r for r in ranks if r in ta.t.get_ranks()] or ta.t.get_ranks()[:1]
    out: dict = {"ranks": ranks, "idle": [], "launch": {}}
    for r in ranks:
        df, _ = ta.get_idle_time_breakdown(ranks=[r], visualize=False)
        for row in df.to_dict("records"):
            out["idle"].append(
                {
                    "rank": r,
                    "stream": int(row["stream"]),
                    "category": row["idle_category"],
                    "idle_us": float(row["idle_time"]),
                    "ratio": float(row["idle_time_ratio"]),
                }
            )
        ls = ta.get_cuda_kernel_launch_stats(ranks=[r], visualize=False)[r]
        q = ls["launch_delay"].quantile([0.5, 0.9, 0.99]).tolist() if len(ls) else [None] * 3
        out["launch"][str(r)] = {
            "n": len(ls),
            "shorter_than_launch": int((ls["gpu_duration"] < ls["cpu_duration"]).sum()),
            "delay_after_call_p50_us": q[0],
            "delay_after_call_p90_us": q[1],
            "delay_after_call_p99_us": q[2],
            "delay_after_call_max_us": float(ls["launch_delay"].max()) if len(ls) else None,
        }
    return out


def main() -> None:
    logging.disable(logging.WARNING)
    res: dict = {}
    for name, (rel, ranks) in PROFILES.items():
        p = SHARED / rel
        if not p.exists():
            continue
        for keep_last in (False, True):
            key = f"{name}{'+last' if keep_last else ''}"
            try:
                res[key] = one(p, ranks, keep_last)
            except Exception as exc:  # noqa: BLE001 - HTA fails on some real traces: record how
                res[key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(key, "done", file=sys.stderr)
    json.dump(res, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
