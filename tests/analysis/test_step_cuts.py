"""Steps cut by the trace's end are in no mean over steps (issue 27 item 2): a constructed run
whose answer is known, and the shared 2-rank profile whose last step ends with its recording."""

from __future__ import annotations

import polars as pl
import pytest

import charllm_trace as ct
from charllm_trace.analysis import AnalyzeOptions, analyze_run, analyze_trace
from charllm_trace.analysis.overlap import overlap
from charllm_trace.analysis.step_cuts import cut_steps
from charllm_trace.regress.sweep import run_row, sweep_rows
from tests.conftest import shared_trace
from tests.helpers.analysis_helpers import cpu, kernel, make_trace

MS = 1_000_000


def _gpu_steps(tail_ms: int, after_ms: int | None = None):  # noqa: ANN202
    """Three ProfilerSteps of 10 ms, one 2 ms kernel each (launched 1 ms in, running 5 ms later);
    the third step's kernel is followed by ``tail_ms`` more of GPU work (the profiler's stop).
    ``after_ms``: a CPU op that far after the last step's end (the recording went on: not cut)."""
    rows = []
    for i in range(3):
        t = i * 10 * MS
        rows += [
            cpu(10 * i, f"ProfilerStep#{i + 1}", t, 10 * MS, kind="annotation"),
            cpu(
                10 * i + 1,
                "cudaLaunchKernel",
                t + MS,
                10_000,
                kind="runtime",
                parent=10 * i,
                correlation=i + 1,
            ),
            kernel(10 * i + 2, "gemm", t + 5 * MS, 2 * MS, correlation=i + 1),
        ]
    rows.append(cpu(40, "cudaLaunchKernel", 29 * MS, 10_000, kind="runtime", parent=20, correlation=9))
    rows.append(kernel(41, "flush", 35 * MS, tail_ms * MS, correlation=9))
    if after_ms is not None:
        rows.append(cpu(50, "aten::empty", 30 * MS + after_ms * MS, 10_000))
    return make_trace(rows, device_model="NVIDIA A100-SXM4-80GB")


def test_cut_step_flagged_and_left_out_of_compare_means() -> None:
    tr = _gpu_steps(tail_ms=20)
    assert cut_steps(tr) == [3]
    ov = overlap(tr, per_step=True)
    rows = ov.per_rank.filter(pl.col("step").is_not_null()).sort("step")
    # GPU windows: 5-15, 15-25 ms, and step 3 from 25 ms to the end of the 20 ms tail (55 ms)
    assert rows["span_ns"].to_list() == [10 * MS, 10 * MS, 30 * MS]
    assert rows["cut"].to_list() == [False, False, True]
    assert any("1 step(s) cut by the trace's end (3)" in n for n in ov.notes)
    an = analyze_trace(tr, AnalyzeOptions(per_step=True, critical_path=False))
    row = run_row(an)
    assert row["step_time_ms"] == pytest.approx(10.0) and row["n_steps"] == 2  # not (10+10+30)/3
    sw = sweep_rows([row], ["r"])
    assert any("1 step(s) cut by the trace's end left out of the step means" in n for n in sw.notes)
    spread = an.overlap.rank_spread.filter(pl.col("measure") == "step_ns")
    assert spread["max_ns"].to_list() == [10 * MS]


def test_step_followed_by_more_recording_is_whole() -> None:
    tr = _gpu_steps(tail_ms=20, after_ms=3)
    assert cut_steps(tr) == []
    row = run_row(analyze_trace(tr, AnalyzeOptions(per_step=True, critical_path=False)))
    assert row["step_time_ms"] == pytest.approx(50 / 3) and row["n_steps"] == 3


def test_a_lone_cut_step_is_kept_with_a_note() -> None:
    rows = [cpu(0, "ProfilerStep#1", 0, 10 * MS, kind="annotation"), cpu(1, "aten::mm", MS, 2 * MS, parent=0)]
    tr = make_trace(rows)
    assert cut_steps(tr) == [1]
    ov = overlap(tr, per_step=True)
    assert any("every step (1) is cut" in n for n in ov.notes)
    row = run_row(analyze_trace(tr, AnalyzeOptions(per_step=True, critical_path=False)))
    assert row["n_steps"] == 1 and row["step_time_ms"] is not None


def test_shared_two_rank_profile_last_step_is_cut() -> None:
    """HTA's 2-rank sample: ProfilerStep#552 ends where both ranks' recordings end (615.6 and
    623.3 ms against 607.2 and 607.9 ms for #551): compare's step time is step 551's alone."""
    run = ct.load(shared_trace("hta/trace_filter_2ranks"))
    assert {r: cut_steps(t) for r, t in run.traces.items()} == {0: [552], 1: [552]}
    an = analyze_run(run, AnalyzeOptions(per_step=True, critical_path=False))
    pr = an.overlap.per_rank.filter(pl.col("step").is_not_null())
    assert pr.filter(pl.col("cut"))["step"].unique().to_list() == [552]
    row = run_row(an)
    whole = pr.filter(pl.col("step") == 551)["span_ns"].max() / 1e6
    assert row["n_steps"] == 1 and row["step_time_ms"] == pytest.approx(whole)
    assert 607 < row["step_time_ms"] < 608
