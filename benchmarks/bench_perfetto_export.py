"""Speed of ``export perfetto`` on a real profile (issue 14 item 4: the export must not get slower).

Times :func:`charllm_trace.render.perfetto.write_chrome_trace` as ``export perfetto`` calls it
(with each rank's critical path, computed once beforehand and not timed) on a real trace,
``--repeat`` times in one process, and prints the minimum and the median of the wall time and
of the process CPU time (steadier on a shared machine). The package is the
one on ``PYTHONPATH`` (not necessarily this checkout), so that two commits can be compared on
one machine, alternating:

    PYTHONPATH=/path/to/old python benchmarks/bench_perfetto_export.py --repeat 7
    PYTHONPATH=/path/to/new python benchmarks/bench_perfetto_export.py --repeat 7

``--check`` also times the strict checker of the tests (tests/perfetto_check.py) on the file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("CHARLLM_SHARED", ROOT.parent / "shared")) / "traces"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=str(SHARED / "hta" / "a100_ddp_nccl_rank0.json.gz"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    import charllm_trace
    from charllm_trace import loader
    from charllm_trace.analysis.critical import critical_path
    from charllm_trace.render.perfetto import write_chrome_trace

    run = loader.load(a.trace)
    cp = critical_path(run)
    times, cpu = [], []
    with tempfile.TemporaryDirectory() as d:
        out = Path(d, "t.json")
        for _ in range(a.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            stats = write_chrome_trace(run, out, critical_path=cp)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        res = {
            "package": str(Path(charllm_trace.__file__).parent),
            "trace": a.trace,
            "slices": stats.slices,
            "flows": stats.flows,
            "min_s": round(min(times), 4),
            "median_s": round(statistics.median(times), 4),
            "cpu_min_s": round(min(cpu), 4),  # process CPU time: less moved by other jobs' load
            "cpu_median_s": round(statistics.median(cpu), 4),
            "out_bytes": out.stat().st_size,
        }
        if a.check:
            sys.path.insert(0, str(ROOT))
            from tests import perfetto_check

            t0 = time.perf_counter()
            problems = perfetto_check.check(out).problems
            res["check_s"] = round(time.perf_counter() - t0, 3)
            res["problems"] = len(problems)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
