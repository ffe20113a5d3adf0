"""--simulate: list schedule from dependencies and durations, hand-computed answers."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis import analyze_trace
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.analysis.whatif import simulate
from charllm_trace.core.model import Trace, TraceMeta


def _trace(rows, deps):
    nodes = pl.DataFrame(
        {
            "id": [r[0] for r in rows],
            "name": [r[1] for r in rows],
            "on_gpu": [r[2] for r in rows],
            "tid": [None if r[2] else 1 for r in rows],
            "stream": [7 if r[2] else None for r in rows],
            "kind": ["kernel" if r[2] else "cpu_op" for r in rows],
            "dur_ns": [r[3] for r in rows],
            "coll_type": [r[4] if len(r) > 4 else None for r in rows],
        }
    )
    d = pl.DataFrame(
        {"node": [a for a, _ in deps], "dep": [b for _, b in deps], "kind": ["data"] * len(deps)}
    )
    return Trace(nodes=nodes, deps=d, meta=TraceMeta(rank=0, has_timestamps=False, clock="none"))


def test_list_schedule_known_answer():
    # CPU: A(10) -> B(5); GPU stream 7: K1(20) after A, K2(5) after B, K3(3) free but queued behind
    rows = [(1, "A", False, 10), (2, "B", False, 5), (3, "K1", True, 20), (4, "K2", True, 5, "all_reduce"),
            (5, "K3", True, 3)]  # fmt: skip
    tr = simulate(_trace(rows, [(2, 1), (3, 1), (4, 2)]))
    starts = dict(zip(tr.nodes["name"].to_list(), tr.nodes["start_ns"].to_list(), strict=True))
    assert starts == {"A": 0, "B": 10, "K1": 10, "K2": 30, "K3": 35}
    assert tr.meta.extra["simulated"] is True and tr.meta.has_timestamps


def test_cycles_are_broken_by_id():
    tr = simulate(_trace([(10, "X", False, 1), (11, "Y", False, 1)], [(10, 11), (11, 10)]))
    starts = dict(zip(tr.nodes["name"].to_list(), tr.nodes["start_ns"].to_list(), strict=True))
    assert starts == {"X": 0, "Y": 1} and "cycles" in tr.meta.extra["simulated_note"]


def test_analyze_labels_simulated():
    rows = [(1, "A", False, 10), (3, "gemm", True, 20), (4, "ncclDevKernel_AllReduce", True, 5, "all_reduce")]
    tr = _trace(rows, [(3, 1), (4, 1)])
    plain = analyze_trace(tr)
    assert plain.overlap is None and "no timestamps" in plain.skipped["overlap"]
    sim = analyze_trace(tr, AnalyzeOptions(simulate=True))
    assert sim.simulated and sim.overlap is not None and sim.overlap.simulated
    t = sim.overlap.total(0).row(0, named=True)
    # one stream: gemm [10,30), all-reduce [30,35): no overlap
    assert t["comm_ns"] == 5 and t["compute_ns"] == 20 and t["overlap_ns"] == 0
