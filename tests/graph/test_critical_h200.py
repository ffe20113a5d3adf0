"""The critical path of the real H200 fixture (``tests/fixtures/traces/h200-1rank-nccl``): a
GPU-bound run (the GPU is busy 767 of the 785 ms traced). Issue 22: the whole-trace path booked
513 ms (65 %) as launch because time kernels spent queued behind earlier kernels was taken for
launch latency, and its step windows overlapped; the path is GPU compute and the steps tile it."""

from __future__ import annotations

import polars as pl
import pytest

from charllm_trace.analysis.critical import critical_path
from charllm_trace.inputs import loader
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def paths() -> pl.DataFrame:
    return critical_path(loader.load(FIXTURES / "h200-1rank-nccl"), segments=False).paths


def test_h200_whole_path_is_gpu_compute(paths: pl.DataFrame) -> None:
    row = paths.filter(pl.col("step").is_null() & (pl.col("scope") == "rank")).row(0, named=True)
    assert row["length_ns"] == row["span_ns"]
    assert row["gpu_compute_ns"] > 0.9 * row["length_ns"]  # measured: 766.8 of 789.2 ms
    assert row["launch_ns"] < 0.01 * row["length_ns"]  # measured: 1.1 ms (513 ms before the fix)


def test_h200_every_step_is_gpu_compute(paths: pl.DataFrame) -> None:
    steps = paths.filter(pl.col("step").is_not_null())
    assert steps.height == 4
    assert (steps["gpu_compute_ns"] > 0.9 * steps["length_ns"]).all()


def test_h200_step_windows_tile_the_trace(paths: pl.DataFrame) -> None:
    """Steps 4-6 had windows of 331-359 ms (they overlapped: per-step spans added up to 1,241 ms
    of a 789 ms trace); now each runs from its first kernel's start to the next step's, and the
    whole-trace path is the sum of the steps' paths, category by category."""
    whole = paths.filter(pl.col("step").is_null() & (pl.col("scope") == "rank")).row(0, named=True)
    steps = paths.filter(pl.col("step").is_not_null()).sort("start_ns")
    assert (steps["start_ns"][1:] == steps["end_ns"][:-1]).all()
    assert steps["start_ns"][0] == whole["start_ns"] and steps["end_ns"][-1] == whole["end_ns"]
    assert steps["span_ns"].sum() == whole["span_ns"]  # measured: 789.17 ms
    assert (steps["span_ns"] < 210_000_000).all()  # measured: 193.8, 191.6, 207.3, 196.5 ms
    for c in ("length", "gpu_compute", "launch", "cpu_op", "sync_wait", "idle"):
        assert steps[f"{c}_ns"].sum() == whole[f"{c}_ns"], c
