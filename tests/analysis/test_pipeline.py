"""Pipeline bubbles (analysis/pipeline.py) against timelines whose answer is known: a 1F1B or
GPipe schedule timed by dependencies alone (each op starts when its stage is free and its
input has arrived), with equal stages (bubble = (p-1)/(m+p-1) exactly) and with a delay before
every forward of the last stage (stage 0's bubble grows by m x delay)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from charllm_trace.analysis.api import analyze_run
from charllm_trace.analysis.pipeline import NO_LABELS, NO_PP_GROUP
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.core.model import ProcessGroup, Run
from tests.helpers.analysis_helpers import cpu, make_trace

MS = 1_000_000
OPTS = AnalyzeOptions(critical_path=False)


def order(schedule: str, s: int, p: int, m: int) -> list[tuple[str, int]]:
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(p - s - 1, m)
    seq = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        seq += [("F", warm + i), ("B", i)]
    return seq + [("B", i) for i in range(m - warm, m)]


def timeline(
    p: int, m: int, tf: int, tb: int, delay: int = 0, schedule: str = "1f1b"
) -> dict[tuple[int, str, int], tuple[int, int]]:
    """(stage, kind, mb) -> (start, end): every op as early as its stage and its input allow."""
    seqs = {s: order(schedule, s, p, m) for s in range(p)}
    done: dict[tuple[int, str, int], tuple[int, int]] = {}
    free = dict.fromkeys(range(p), 0)
    pos = dict.fromkeys(range(p), 0)
    while len(done) < 2 * p * m:
        for s in range(p):
            if pos[s] == len(seqs[s]):
                continue
            kind, i = seqs[s][pos[s]]
            dep = (s - 1, "F", i) if kind == "F" else (s + 1, "B", i)
            if kind == "F" and s == 0 or kind == "B" and s == p - 1:
                ready = 0 if kind == "F" else done[(s, "F", i)][1]
            elif dep in done:
                ready = done[dep][1]
            else:
                continue
            start = max(free[s], ready)
            dur = (tf + (delay if s == p - 1 else 0)) if kind == "F" else tb
            done[(s, kind, i)] = (start, start + dur)
            free[s], pos[s] = start + dur, pos[s] + 1
    return done


def pipeline_run(
    tl: dict[tuple[int, str, int], tuple[int, int]], p: int, *, groups: bool = True, nested_comm: int = 0
) -> Run:
    """One rank per stage, one step; ``nested_comm`` ns of a recv inside every backward label."""
    end = max(e for _, e in tl.values())
    pg = ProcessGroup(name="pipe", desc="pp", ranks=tuple(range(p)))
    traces = {}
    for s in range(p):
        rows: list[dict[str, Any]] = [cpu(1, "ProfilerStep#5", 0, end + MS)]
        for (st, kind, i), (a, b) in sorted(tl.items()):
            if st != s:
                continue
            name = f"{'forward' if kind == 'F' else 'backward'}_mb{i}"
            rows.append(cpu(len(rows) + 1, name, a, b - a, parent=1))
            if nested_comm and kind == "B":
                rows.append(cpu(len(rows) + 1, "c10d::recv_", a, nested_comm, parent=len(rows)))
        meta: dict[str, Any] = {"process_groups": (pg,)} if groups else {}
        traces[s] = make_trace(rows, rank=s, **meta)
    return Run(traces=traces)


def stages(run: Run) -> pl.DataFrame:
    res = analyze_run(run, OPTS)
    assert res.pipeline is not None, res.skipped
    return res.pipeline.stages.sort("stage")


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (3, 3)])
def test_equal_stages_bubble_is_the_theory(p: int, m: int) -> None:
    st = stages(pipeline_run(timeline(p, m, 1 * MS, 2 * MS), p))
    assert st["schedule"].to_list() == ["1f1b"] * p
    assert st["n_microbatches"].to_list() == [m] * p
    theory = 100.0 * (p - 1) / (m + p - 1)
    assert st["theory_pct"].to_list() == pytest.approx([theory] * p)
    assert st["bubble_pct"].to_list() == pytest.approx([theory] * p)
    # every stage idles (p-1) x (tf + tb) of the window
    assert st["bubble_ns"].to_list() == [(p - 1) * 3 * MS] * p


def test_delay_before_last_stage_forward_grows_stage0_bubble_by_m_times_delay() -> None:
    p, m, d = 2, 4, 5 * MS
    base = stages(pipeline_run(timeline(p, m, 1 * MS, 2 * MS), p))
    slow = stages(pipeline_run(timeline(p, m, 1 * MS, 2 * MS, delay=d), p))
    grow = slow["bubble_ns"][0] - base["bubble_ns"][0]
    assert grow == m * d
    # the last stage's own work grew by the same amount: its bubble does not change
    assert slow["bubble_ns"][1] == base["bubble_ns"][1]


def test_phases_partition_the_window_and_hold_the_bubble() -> None:
    p, m = 2, 4
    res = analyze_run(pipeline_run(timeline(p, m, 1 * MS, 2 * MS), p), OPTS)
    assert res.pipeline is not None
    st = res.pipeline.stages.sort("stage")
    phases = st["warmup_ns"] + st["steady_ns"] + st["cooldown_ns"]
    assert phases.to_list() == st["window_ns"].to_list()
    bubbles = st["warmup_bubble_ns"] + st["steady_bubble_ns"] + st["cooldown_bubble_ns"]
    assert bubbles.to_list() == st["bubble_ns"].to_list()
    mb = res.pipeline.microbatches
    # stage 0 of 2: one warm-up forward, one cool-down backward; the last stage has neither
    s0 = mb.filter(pl.col("stage") == 0).sort("start_ns")
    assert s0["phase"].to_list() == ["warmup"] + ["steady"] * 6 + ["cooldown"]
    assert set(mb.filter(pl.col("stage") == 1)["phase"]) == {"steady"}
    # by hand (tf 1 ms, tb 2 ms; window 0-15 ms): stage 1 waits tf for its first input and idles
    # the last tb while stage 0 runs backward 3; stage 0 waits for backward 0 (2-4 ms) and for
    # backward 3 (12-13 ms)
    assert st["warmup_bubble_ns"].to_list() == [0, 1 * MS]
    assert st["steady_bubble_ns"].to_list() == [2 * MS, 0]
    assert st["cooldown_bubble_ns"].to_list() == [1 * MS, 2 * MS]
    assert st["window_ns"].to_list() == [15 * MS, 15 * MS]


def test_gpipe_is_recognised() -> None:
    p, m = 2, 4
    st = stages(pipeline_run(timeline(p, m, 1 * MS, 2 * MS, schedule="gpipe"), p))
    assert st["schedule"].to_list() == ["gpipe"] * p
    assert st["theory_pct"].to_list() == pytest.approx([20.0, 20.0])


def test_unrecognised_schedule_is_measured_with_a_note() -> None:
    tl = timeline(2, 4, 1 * MS, 2 * MS)
    # stage 0 runs backward 1 before backward 0: neither 1F1B nor GPipe
    tl[(0, "B", 0)], tl[(0, "B", 1)] = tl[(0, "B", 1)], tl[(0, "B", 0)]
    res = analyze_run(pipeline_run(tl, 2), OPTS)
    assert res.pipeline is not None
    st = res.pipeline.stages
    assert set(st["schedule"]) == {"unrecognised"}
    assert st["theory_pct"].is_null().all() and st["warmup_ns"].is_null().all()
    assert (st["bubble_ns"] == st["window_ns"] - st["busy_ns"]).all()
    assert any("neither a 1F1B nor a GPipe" in n and "ms of windows" in n for n in res.pipeline.notes)


def test_communication_nested_in_a_label_is_not_work() -> None:
    p, m, c = 2, 4, 500_000
    st = stages(pipeline_run(timeline(p, m, 1 * MS, 2 * MS), p, nested_comm=c))
    base = stages(pipeline_run(timeline(p, m, 1 * MS, 2 * MS), p))
    assert (base["busy_ns"] - st["busy_ns"]).to_list() == [m * c] * p


def test_without_pipeline_group_each_rank_is_one_stage_with_a_note() -> None:
    res = analyze_run(pipeline_run(timeline(2, 4, 1 * MS, 2 * MS), 2, groups=False), OPTS)
    assert res.pipeline is not None
    assert res.pipeline.stages["n_stages"].to_list() == [1, 1]
    assert any(NO_PP_GROUP in n for n in res.pipeline.notes)


def test_no_labels_is_skipped_with_the_reason() -> None:
    res = analyze_run(
        Run.single(make_trace([cpu(1, "ProfilerStep#1", 0, MS), cpu(2, "aten::mm", 0, 10)])), OPTS
    )
    assert res.pipeline is None and res.skipped["pipeline"] == NO_LABELS


def test_a_profile_cut_short_is_measured_with_a_note() -> None:
    tl = timeline(2, 4, 1 * MS, 2 * MS)
    del tl[(0, "B", 3)]  # stage 0's last backward never recorded
    tl[(1, "F", 99999999999999999999)] = (20 * MS, 21 * MS)  # a label number past int64
    res = analyze_run(pipeline_run(tl, 2), OPTS)
    assert res.pipeline is not None
    assert set(res.pipeline.stages["schedule"]) == {"unrecognised"}
    assert any("neither a 1F1B nor a GPipe" in n for n in res.pipeline.notes)
    assert res.pipeline.microbatches["microbatch"].null_count() == 1


def test_device_side_labels_are_preferred_and_their_comm_kernels_are_not_work() -> None:
    # a GPU rank: the host label runs ahead of the device; the device's copy of the label is the
    # work's time, and a communication kernel inside it is not the stage's work
    from tests.helpers.analysis_helpers import kernel

    rows = [
        cpu(1, "ProfilerStep#3", 0, 50 * MS),
        cpu(2, "forward_mb0", 0, 1 * MS, parent=1),
        cpu(3, "backward_mb0", 1 * MS, 1 * MS, parent=1),
        kernel(4, "forward_mb0", 10 * MS, 6 * MS, kind="gpu_user_annotation"),
        kernel(5, "backward_mb0", 16 * MS, 8 * MS, kind="gpu_user_annotation"),
        kernel(6, "ncclDevKernel_SendRecv", 20 * MS, 3 * MS, coll_type="send", node_type="COMM_SEND"),
    ]
    res = analyze_run(Run.single(make_trace(rows, rank=0)), OPTS)
    assert res.pipeline is not None
    mb = res.pipeline.microbatches.sort("start_ns")
    assert mb["dur_ns"].to_list() == [6 * MS, 8 * MS]
    assert mb["comm_ns"].to_list() == [0, 3 * MS]
    st = res.pipeline.stages.row(0, named=True)
    assert (st["step"], st["schedule"], st["n_stages"]) == (3, "1f1b", 1)
    assert (st["window_ns"], st["busy_ns"], st["bubble_ns"], st["theory_pct"]) == (
        14 * MS,
        11 * MS,
        3 * MS,
        0.0,
    )
