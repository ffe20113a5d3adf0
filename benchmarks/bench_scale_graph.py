"""Bytes the critical path and what-if send to the driver per rank with ``--scheduler``
(``engine/graph_step.py``): the rounds run in this process with an engine that pickles what each
task returns to the driver, as Dask sends it. Also the driver's own time (matching, solving the
virtual points, following the paths) and the worker-side time per rank.

    python benchmarks/bench_scale_graph.py [RUN ...]   (default: the fixture run and the shared DLRM set)
    python benchmarks/bench_scale_graph.py --cluster local:2 RUN   (``analyze_distributed`` on a
        real cluster: the wall time of the whole analysis and of its graph rounds)
"""

from __future__ import annotations

import pickle
import sys
import time
from collections import defaultdict
from pathlib import Path

from charllm_trace.analysis.rank_parts import analyze_rank
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.engine import graph_step as gs
from charllm_trace.engine.tasks import Loaded
from charllm_trace.inputs.loader import load

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [
    ROOT / "tests/fixtures/traces/cpu-2rank-gloo",
    ROOT.parent / "shared/traces/param/dlrm_8ranks_v100",
]
SENT = {  # the tasks whose results travel to the driver (the others stay on the workers)
    "instances_task": "instances",
    "contracted_task": "A, D, notes",
    "summary_task": "windows, start times, what-if rows",
    "walk_task": "path pieces",
}


NAMES = {
    "build_task",
    "instances_task",
    "join_task",
    "contracted_task",
    "finish_task",
    "summary_task",
    "walk_task",
}


class CountingEngine:
    """Runs each task here; records the pickled size of what the driver gathers, and task time."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = defaultdict(int)
        self.task_s = 0.0
        self.pickle_s = 0.0
        self.rounds = 0

    def map(self, fn, items, *more, **kw):
        out = []
        for args in zip(items, *more, strict=True):
            args = tuple(a[1] if isinstance(a, tuple) and len(a) == 2 and a[0] in NAMES else a for a in args)
            t0 = time.perf_counter()
            res = fn(*args, **kw)
            self.task_s += time.perf_counter() - t0
            out.append((fn.__name__, res))
        return out

    def gather(self, handles):
        self.rounds += 1
        t0 = time.perf_counter()
        for name, res in handles:
            if name in SENT:
                self.bytes[SENT[name]] += len(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))
        self.pickle_s += time.perf_counter() - t0
        return [res for _, res in handles]

    def release(self, handles) -> None:
        pass


def measure(path: Path, opts: AnalyzeOptions) -> tuple[dict[str, int], int, float, float, int]:
    run = load(path, cache=False)
    handles = [Loaded(r, run.traces[r], str(path), None) for r in run.ranks]
    no_ts = [r for r in run.ranks if analyze_rank(r, run.traces[r], opts, {}, {}).no_ts]
    eng = CountingEngine()
    t0 = time.perf_counter()
    cp, wi = gs.graph_step(eng, handles, run.ranks, opts, {}, no_ts)
    total = time.perf_counter() - t0
    return dict(eng.bytes), len(run.ranks), eng.task_s, total - eng.task_s - eng.pickle_s, eng.rounds


def main(paths: list[Path]) -> None:
    for path in paths:
        for label, opts in (
            ("critical path", AnalyzeOptions()),
            ("critical path + --what-if comm=0.5", AnalyzeOptions(what_if={"comm": 0.5})),
        ):
            sizes, n, task_s, driver_s, rounds = measure(path, opts)
            per = {k: v / n for k, v in sizes.items()}
            print(
                f"{path.name} ({n} ranks), {label}: bytes per rank "
                + ", ".join(f"{k} {v:,.0f}" for k, v in per.items())
                + f"; total {sum(per.values()):,.0f} B/rank; {rounds} gathers; worker tasks {task_s / n:.3f} s/rank;"
                f" driver {driver_s:.3f} s"
            )


def on_cluster(address: str, path: str) -> None:
    from charllm_trace.engine import Cluster, driver

    spent: list[float] = []
    inner = gs.graph_step

    def timed(*a, **kw):
        t0 = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            spent.append(time.perf_counter() - t0)

    gs.graph_step = timed
    t0 = time.perf_counter()
    driver.analyze_distributed(path, AnalyzeOptions(), cluster=Cluster(address), cache=False)
    load1 = open("/proc/loadavg").read().split()[0]
    print(
        f"{path}: analyze {time.perf_counter() - t0:.1f} s, of which graph rounds {spent[0]:.1f} s (load {load1})"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cluster"]:
        on_cluster(sys.argv[2], sys.argv[3])
    else:
        main([Path(p) for p in sys.argv[1:]] or DEFAULT)
