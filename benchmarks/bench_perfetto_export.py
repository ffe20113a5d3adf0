"""Speed of ``export perfetto`` on a real profile (issue 14 item 4: the export must not get slower).

Times :func:`charllm_trace.exports.perfetto.write_chrome_trace` as ``export perfetto`` calls it
(with each rank's critical path, computed once beforehand and not timed) on a real trace,
``--repeat`` times in one process, and prints the minimum and the median of the wall time and
of the process CPU time (steadier on a shared machine).

``--baseline FILE`` also loads another version of ``exports/perfetto.py`` (e.g. the previous
commit's, ``git show HEAD~3:charllm_trace/exports/perfetto.py > /tmp/old_perfetto.py``) as a
module of its own and alternates the two, call by call, in the same process on the same loaded
run, so that the load of other jobs falls on both alike:

    python benchmarks/bench_perfetto_export.py --repeat 30 --baseline /tmp/old_perfetto.py

``--big`` exports bench_share.py's run instead (the real ResNet profile repeated with shifted
times to 1,057,658 nodes, no critical path, as in that benchmark). ``--check`` also times the
strict checker of the tests (tests/helpers/perfetto_check.py) on the file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout, installed or not
SHARED = Path(os.environ.get("CHARLLM_SHARED", ROOT.parent / "shared")) / "traces"


def _module(path: str):
    spec = importlib.util.spec_from_file_location("baseline_perfetto", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _summary(wall: list[float], cpu: list[float]) -> dict:
    return {
        "min_s": round(min(wall), 4),
        "median_s": round(statistics.median(wall), 4),
        "cpu_min_s": round(min(cpu), 4),
        "cpu_median_s": round(statistics.median(cpu), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=str(SHARED / "hta" / "a100_ddp_nccl_rank0.json.gz"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", help="another exports/perfetto.py to alternate with")
    ap.add_argument("--big", action="store_true", help="bench_share.py's 1M-node run")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    from charllm_trace.exports import perfetto

    from charllm_trace.analysis.critical import critical_path
    from charllm_trace.inputs import loader

    writers = {"this": perfetto.write_chrome_trace}
    if a.baseline:
        writers["baseline"] = _module(a.baseline).write_chrome_trace
    if a.big:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_share import _big_run

        run, _n = _big_run()
        cp = None
        a.trace = "bench_share.py: param/resnet_kineto.json.gz x 14"
    else:
        run = loader.load(a.trace)
        cp = critical_path(run)
    wall: dict[str, list[float]] = {k: [] for k in writers}
    cpu: dict[str, list[float]] = {k: [] for k in writers}
    res: dict = {"trace": a.trace, "repeat": a.repeat}
    with tempfile.TemporaryDirectory() as d:
        out = Path(d, "t.json")
        for _ in range(a.repeat):
            for name, write in writers.items():
                t0, c0 = time.perf_counter(), time.process_time()
                stats = write(run, out, critical_path=cp)
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
                res.setdefault(name, {}).update(slices=stats.slices, flows=stats.flows)
        for name in writers:
            res[name].update(_summary(wall[name], cpu[name]))
        if a.baseline:
            res["cpu_median_ratio"] = round(res["this"]["cpu_median_s"] / res["baseline"]["cpu_median_s"], 3)
            res["wall_median_ratio"] = round(res["this"]["median_s"] / res["baseline"]["median_s"], 3)
        if a.check:
            from tests.helpers import perfetto_check

            perfetto.write_chrome_trace(run, out, critical_path=cp)
            t0 = time.perf_counter()
            problems = perfetto_check.check(out).problems
            res["check_s"] = round(time.perf_counter() - t0, 3)
            res["problems"] = len(problems)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
