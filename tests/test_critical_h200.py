"""The critical path of the real H200 fixture (``tests/fixtures/traces/h200-1rank-nccl``): a
GPU-bound run (the GPU is busy 767 of the 785 ms traced). Issue 22: the whole-trace path booked
513 ms (65 %) as launch because time kernels spent queued behind earlier kernels was taken for
launch latency; the path is GPU compute."""

from __future__ import annotations

import polars as pl
import pytest

from charllm_trace import loader
from charllm_trace.analysis.critical import critical_path
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


@pytest.mark.xfail(strict=True, reason="not done yet: step windows end at the step's last GPU op and overlap")
def test_h200_step_windows_tile_the_trace(paths: pl.DataFrame) -> None:
    whole = paths.filter(pl.col("step").is_null() & (pl.col("scope") == "rank")).row(0, named=True)
    steps = paths.filter(pl.col("step").is_not_null()).sort("start_ns")
    assert (steps["start_ns"][1:] >= steps["end_ns"][:-1]).all()
    assert steps["span_ns"].sum() <= whole["span_ns"]
