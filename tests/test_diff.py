"""diff A B: the side-by-side engine, the sections, and the CLI."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from charllm_trace.model import Run, Trace, TraceMeta
from charllm_trace.regress.diff import diff_runs, side_by_side


def test_side_by_side_outer_join_and_changes() -> None:
    a = pl.DataFrame({"k": ["x", "y", "z"], "v": [10.0, 0.0, 5.0]})
    b = pl.DataFrame({"k": ["x", "y", "w"], "v": [12.0, 3.0, 1.0]})
    f = side_by_side(a, b, ["k"], ["v"]).sort("k")
    rows = {r["k"]: r for r in f.to_dicts()}
    assert set(rows) == {"w", "x", "y", "z"}
    assert rows["x"]["v_delta"] == pytest.approx(2.0) and rows["x"]["v_rel"] == pytest.approx(0.2)
    assert rows["y"]["v_delta"] == pytest.approx(3.0) and rows["y"]["v_rel"] is None  # from 0
    assert rows["z"]["v_b"] is None and rows["z"]["v_delta"] is None
    assert rows["w"]["v_a"] is None and rows["w"]["v_b"] == 1.0


def test_side_by_side_one_side_absent() -> None:
    a = pl.DataFrame({"k": ["x"], "v": [1.0]})
    f = side_by_side(a, None, ["k"], ["v"])
    assert f.to_dicts() == [{"k": "x", "v_a": 1.0, "v_b": None, "v_delta": None, "v_rel": None}]


def _run(kernels: list[tuple[str, int]], rank: int = 0) -> Run:
    n = len(kernels)
    nodes = pl.DataFrame(
        {
            "id": list(range(n)),
            "name": [k for k, _ in kernels],
            "node_type": ["COMP"] * n,
            "kind": ["kernel"] * n,
            "on_gpu": [True] * n,
            "start_ns": [i * 10_000 for i in range(n)],
            "dur_ns": [d for _, d in kernels],
        }
    )
    return Run.single(Trace(nodes=nodes, meta=TraceMeta(rank=rank)))


def _analysis(scale: float, steps: list[int]):  # noqa: ANN202
    from charllm_trace.analysis.results import (
        BANDWIDTH_SUMMARY_SCHEMA,
        COLLECTIVE_SCHEMA,
        MATCHED_SCHEMA,
        OVERLAP_GROUP_SCHEMA,
        OVERLAP_SCHEMA,
        BandwidthResult,
        OverlapResult,
        RunAnalysis,
        frame,
    )

    k = len(steps)
    ov = OverlapResult(
        per_rank=frame(
            {
                "rank": [0] * k + [1] * k,
                "step": steps + steps,
                "span_ns": [10_000_000] * k + [int(12_000_000 * scale)] * k,
                "comm_ns": [4_000_000] * (2 * k),
                "overlap_ns": [int(3_000_000 / scale)] * (2 * k),
                "exposed_comm_ns": [4_000_000 - int(3_000_000 / scale)] * (2 * k),
            },
            OVERLAP_SCHEMA,
        ),
        per_group=frame({}, OVERLAP_GROUP_SCHEMA),
        per_dim=frame({}, OVERLAP_GROUP_SCHEMA),
    )
    bw = BandwidthResult(
        collectives=frame(
            {
                "rank": [0, 0, 1],
                "coll_type": ["all_reduce", "all_reduce", "broadcast"],
                "dur_ns": [int(1_000_000 * scale), int(3_000_000 * scale), 500_000],
                "bytes": [4_000_000, 4_000_000, 1_000],
                "busbw_gbps": [8.0 / scale, 2.0 / scale, 0.002],
            },
            COLLECTIVE_SCHEMA,
        ),
        summary=frame({}, BANDWIDTH_SUMMARY_SCHEMA),
        matched=frame({}, MATCHED_SCHEMA),
    )
    return RunAnalysis(overlap=ov, bandwidth=bw, energy=None, power=None, ranks=[0, 1])


def test_diff_runs_sections() -> None:
    run_a = _run([("gemm", 1000), ("gemm", 1000), ("nccl_ar", 500), ("memcpy_x", 7)])
    run_b = _run([("gemm", 1500), ("nccl_ar", 500), ("softmax", 300)])
    d = diff_runs(run_a, _analysis(1.0, [3, 4]), run_b, _analysis(2.0, [3, 4]))
    assert [s.name for s in d.sections] == ["collectives", "operators", "steps"]
    # collectives: all_reduce total time 4 ms -> 8 ms, median busbw 5 -> 2.5
    coll = {r["coll_type"]: r for r in d.section("collectives").frame.to_dicts()}
    assert coll["all_reduce"]["count_a"] == 2 and coll["all_reduce"]["count_b"] == 2
    assert coll["all_reduce"]["time_ms_a"] == pytest.approx(4.0)
    assert coll["all_reduce"]["time_ms_rel"] == pytest.approx(1.0)
    assert coll["all_reduce"]["busbw_gbps_a"] == pytest.approx(5.0)
    assert coll["all_reduce"]["busbw_gbps_b"] == pytest.approx(2.5)
    assert coll["broadcast"]["time_ms_delta"] == pytest.approx(0.0)
    # operators: kernels by name, sorted by the larger time
    ops = d.section("operators").frame
    assert ops["name"].to_list() == ["gemm", "nccl_ar", "softmax", "memcpy_x"]
    g = ops.row(0, named=True)
    assert (g["count_a"], g["count_b"], g["time_ms_a"], g["time_ms_b"]) == (2, 1, 0.002, 0.0015)
    assert g["time_ms_rel"] == pytest.approx(-0.25)
    # steps: "all" last; slowest rank; overlap pooled
    steps = d.section("steps").frame
    assert steps["step"].to_list() == ["3", "4"]
    s3 = steps.row(0, named=True)
    assert s3["step_ms_a"] == pytest.approx(12.0) and s3["step_ms_b"] == pytest.approx(24.0)
    assert s3["overlap_pct_a"] == pytest.approx(75.0) and s3["overlap_pct_b"] == pytest.approx(37.5)
    assert s3["exposed_comm_ms_b"] == pytest.approx(2.5)
    assert "mean_w" not in d.section("steps").values  # no telemetry on either side


def test_diff_steps_matched_in_order_when_numbers_differ() -> None:
    run = _run([("gemm", 1000)])
    d = diff_runs(run, _analysis(1.0, [3, 4]), run, _analysis(1.0, [10, 11, 12]))
    steps = d.section("steps").frame["step"].to_list()
    assert steps == ["3|10", "4|11", "-|12"]
    assert any("matched in order" in n for n in d.notes)


def test_diff_without_analyses_still_compares_operators() -> None:
    from charllm_trace.analysis.results import RunAnalysis

    empty = RunAnalysis(overlap=None, bandwidth=None, energy=None, power=None, skipped={"bandwidth": "none"})
    run = _run([("gemm", 1000)])
    d = diff_runs(run, empty, run, dataclasses.replace(empty))
    assert [s.name for s in d.sections] == ["operators"]
    assert d.section("operators").frame["time_ms_delta"].to_list() == [0.0]
    assert len(d.notes) == 2
