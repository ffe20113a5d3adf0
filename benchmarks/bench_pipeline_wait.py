"""What the pipeline view and the waiting/transfer split add to ``analyze`` (issue 25: at most 15 %).
Runnable by hand, not in CI.

    python benchmarks/bench_pipeline_wait.py RUN [--reps 5] [--no-critical-path]

Loads RUN once, then times ``analyze_run`` (which includes both) and, separately, the two parts
alone (every rank's ``rank_microbatches`` and ``rank_comm_ops``, then ``pipeline_from`` and
``comm_wait_from``); prints the medians and the parts' time as a share of the rest of
``analyze_run``. For 128 ranks, make the run with ``benchmarks/make_many_ranks.py 128 DIR``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from charllm_trace.analysis.api import analyze_run, run_dims
from charllm_trace.analysis.comm_wait import comm_wait_from, rank_comm_ops
from charllm_trace.analysis.pipeline import pipeline_from, rank_microbatches
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.inputs.loader import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-critical-path", action="store_true")
    a = ap.parse_args()
    run = load(a.run)
    opts = AnalyzeOptions(critical_path=not a.no_critical_path)
    dims = run_dims(run, opts)

    def parts() -> None:
        pf, cf = [], []
        for r in run.ranks:
            pf.append(rank_microbatches(r, run.traces[r], dims)[0])
            cf.append(rank_comm_ops(r, run.traces[r], dims)[0])
        pipeline_from(pf)
        comm_wait_from(cf)

    whole, new = [], []
    for _ in range(a.reps):
        t = time.perf_counter()
        analyze_run(run, opts)
        whole.append(time.perf_counter() - t)
        t = time.perf_counter()
        parts()
        new.append(time.perf_counter() - t)
    w, n = statistics.median(whole), statistics.median(new)
    print(
        f"{len(run.ranks)} ranks: analyze_run {w:.3f} s, pipeline + waiting {n:.4f} s = {100 * n / (w - n):.1f} % of the rest"
    )


if __name__ == "__main__":
    main()
