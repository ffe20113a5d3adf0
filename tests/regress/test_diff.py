"""diff A B: the side-by-side engine, the sections, and the CLI."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.core.model import Run, Trace, TraceMeta
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
    assert coll["all_reduce"]["calls_a"] == 2 and coll["all_reduce"]["calls_b"] == 2
    assert coll["all_reduce"]["time_a"] == pytest.approx(4.0)
    assert coll["all_reduce"]["time_rel"] == pytest.approx(1.0)
    assert coll["all_reduce"]["busbw_median_a"] == pytest.approx(5.0)
    assert coll["all_reduce"]["busbw_median_b"] == pytest.approx(2.5)
    assert coll["broadcast"]["time_delta"] == pytest.approx(0.0)
    # operators: kernels by name, sorted by the larger time
    ops = d.section("operators").frame
    assert ops["name"].to_list() == ["gemm", "nccl_ar", "softmax", "memcpy_x"]
    g = ops.row(0, named=True)
    assert (g["calls_a"], g["calls_b"], g["time_a"], g["time_b"]) == (2, 1, 0.002, 0.0015)
    assert g["time_rel"] == pytest.approx(-0.25)
    # steps: "all" last; slowest rank; overlap pooled
    steps = d.section("steps").frame
    assert steps["step"].to_list() == ["3", "4"]
    s3 = steps.row(0, named=True)
    assert s3["step_time_a"] == pytest.approx(12.0) and s3["step_time_b"] == pytest.approx(24.0)
    assert s3["overlap_a"] == pytest.approx(75.0) and s3["overlap_b"] == pytest.approx(37.5)
    assert s3["exposed_comm_b"] == pytest.approx(2.5)
    assert "mean_power" not in d.section("steps").values  # no telemetry on either side


def test_diff_steps_matched_in_order_when_numbers_differ() -> None:
    run = _run([("gemm", 1000)])
    d = diff_runs(run, _analysis(1.0, [3, 4]), run, _analysis(1.0, [10, 11, 12]))
    steps = d.section("steps").frame["step"].to_list()
    assert steps == ["3|10", "4|11", "-|12"]
    assert "matched in order" in d.section("steps").note


def test_diff_without_analyses_still_compares_operators() -> None:
    from charllm_trace.analysis.results import RunAnalysis

    empty = RunAnalysis(overlap=None, bandwidth=None, energy=None, power=None, skipped={"bandwidth": "none"})
    run = _run([("gemm", 1000)])
    d = diff_runs(run, empty, run, dataclasses.replace(empty))
    assert [s.name for s in d.sections] == ["operators"]
    assert d.section("operators").frame["time_delta"].to_list() == [0.0]
    assert len(d.notes) == 2


# ---------------------------------------------------------------------------
# CLI on a real trace and a copy with slower NCCL kernels
# ---------------------------------------------------------------------------


def _cli(*args: str):  # noqa: ANN202
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    return CliRunner().invoke(main, list(args))


def test_diff_cli_real_trace_and_slower_copy(tmp_path: Path) -> None:
    import gzip
    import json

    from test_baseline_check import _stretch_nccl_kernels

    from tests.conftest import shared_trace

    src = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    slow = tmp_path / "slow.json.gz"
    n_stretched = _stretch_nccl_kernels(src, slow, 2.0)
    events = json.loads(gzip.decompress(src.read_bytes()))["traceEvents"]
    nccl = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")]
    assert n_stretched == len(nccl)

    r = _cli("diff", str(src), str(slow), "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    secs = {s["name"]: s for s in d["sections"]}
    assert set(secs) == {"collectives", "operators", "steps"}
    colls = {row["coll_type"]: row for row in secs["collectives"]["rows"]}
    assert sum(row["calls_a"] for row in colls.values()) == len(nccl)
    for row in colls.values():
        assert row["calls_delta"] == 0
        assert row["time_rel"] == pytest.approx(1.0, abs=1e-3)  # twice the time
        assert row["busbw_median_rel"] == pytest.approx(-0.5, abs=1e-3)  # half the bandwidth
    for row in secs["operators"]["rows"]:
        if row["name"].startswith("ncclKernel"):
            assert row["time_rel"] == pytest.approx(1.0, abs=1e-3)
        else:
            assert row["time_delta"] == pytest.approx(0.0, abs=1e-9)
    total = next(row for row in secs["steps"]["rows"] if row["step"] == "all")
    assert total["exposed_comm_delta"] > 0
    assert {row["step"] for row in secs["steps"]["rows"]} == {
        str(int(e["name"].split("#")[1])) for e in events if e.get("name", "").startswith("ProfilerStep#")
    } | {"all"}

    table = _cli("diff", str(src), str(slow))
    assert table.exit_code == 0
    assert "all_reduce" in table.output and "+100.0%" in table.output and "-50.0%" in table.output

    same = json.loads(_cli("diff", str(src), str(src), "--format", "json").output)
    for sec in same["sections"]:
        for row in sec["rows"]:
            for v in sec["values"]:
                assert row[f"{v}_delta"] in (0, 0.0, None)


def test_diff_cli_bad_input_exits_2(tmp_path: Path) -> None:
    r = _cli("diff", str(tmp_path / "a"), str(tmp_path / "b"))
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [f"error: {tmp_path / 'a'}: no such file or directory"]


def test_diff_energy_and_power_sections() -> None:
    from charllm_trace.analysis.results import (
        ENERGY_SCHEMA,
        ENERGY_TOTAL_SCHEMA,
        POWER_SCHEMA,
        THROTTLE_SCHEMA,
        EnergyResult,
        PowerResult,
        frame,
    )

    def with_energy(scale: float):  # noqa: ANN202
        an = _analysis(1.0, [3])
        an.energy = EnergyResult(
            totals=frame({}, ENERGY_TOTAL_SCHEMA),
            by=frame(
                {
                    "rank": [0, 1, 0, 0],
                    "group": ["phase", "phase", "phase", "op"],
                    "key": ["forward", "forward", "backward", "aten::mm"],
                    "energy_j": [10.0 * scale, 30.0 * scale, 5.0, 99.0],
                },
                ENERGY_SCHEMA,
            ),
        )
        an.power = PowerResult(
            per_step=frame(
                {
                    "rank": [0, 1, 0, 1],
                    "device": [0, 0, 0, 0],
                    "step": [3, 3, None, None],
                    "avg_w": [100.0 * scale, 200.0 * scale, 150.0, 150.0],
                    "peak_w": [300.0, 400.0 * scale, 400.0, 400.0],
                },
                POWER_SCHEMA,
            ),
            throttle=frame({}, THROTTLE_SCHEMA),
        )
        return an

    run = _run([("gemm", 1000)])
    d = diff_runs(run, with_energy(1.0), run, with_energy(1.5))
    energy = {r["phase"]: r for r in d.section("energy").frame.to_dicts()}
    assert set(energy) == {"forward", "backward"}  # the "op" aggregation is not a phase
    assert energy["forward"]["energy_a"] == pytest.approx(40.0)  # summed over ranks
    assert energy["forward"]["energy_rel"] == pytest.approx(0.5)
    assert energy["backward"]["energy_delta"] == pytest.approx(0.0)
    steps = {r["step"]: r for r in d.section("steps").frame.to_dicts()}
    assert "mean_power" in d.section("steps").values
    assert steps["3"]["mean_power_a"] == pytest.approx(150.0)  # mean over ranks
    assert steps["3"]["peak_power_b"] == pytest.approx(600.0)  # max over ranks
    assert steps["3"]["mean_power_rel"] == pytest.approx(0.5)
