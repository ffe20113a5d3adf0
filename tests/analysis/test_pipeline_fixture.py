"""The 4-rank pipeline fixtures (tests/fixtures/traces/cpu-4rank-pp2-dp2*, README there): the
schedule that was run (1F1B, 2 stages, 4 microbatches, pp=2 x dp=2) is the known answer, and
the run with a 20 ms delay before every forward of stage 1 must add about 4 x 20 ms to stage 0's
bubble."""

from __future__ import annotations

import re

import polars as pl
import pytest

from charllm_trace.analysis import AnalyzeOptions, analyze_run
from charllm_trace.analysis.pipeline_results import PipelineResult
from charllm_trace.inputs.loader import load
from tests.conftest import FIXTURES, invoke

RUN = FIXTURES / "cpu-4rank-pp2-dp2"
DELAYED = FIXTURES / "cpu-4rank-pp2-dp2-delay20"
OPTS = AnalyzeOptions(critical_path=False)


def _pipeline(path) -> PipelineResult:  # type: ignore[no-untyped-def]
    res = analyze_run(load(path), OPTS)
    assert res.pipeline is not None, res.skipped
    return res.pipeline


@pytest.fixture(scope="module")
def pipe() -> PipelineResult:
    return _pipeline(RUN)


def test_stages_and_pipelines_come_from_the_pp_groups(pipe: PipelineResult) -> None:
    st = pipe.stages
    assert st.height == 8  # 4 ranks x steps 2, 3
    assert sorted(set(st["step"])) == [2, 3]
    by_rank = dict(st.select("rank", "stage").unique().iter_rows())
    assert by_rank == {0: 0, 1: 0, 2: 1, 3: 1}  # Megatron order: stage slowest
    pipes = st.group_by("pipeline").agg(pl.col("rank").unique().sort()).sort("pipeline")
    assert sorted(tuple(r) for r in pipes["rank"]) == [(0, 2), (1, 3)]
    assert set(st["n_stages"]) == {2} and set(st["n_microbatches"]) == {4}


def test_the_schedule_run_is_recognised(pipe: PipelineResult) -> None:
    st = pipe.stages
    assert set(st["schedule"]) == {"1f1b"}
    assert st["theory_pct"].to_list() == pytest.approx([20.0] * 8)
    mb = pipe.microbatches
    assert mb.height == 4 * 2 * 8  # ranks x steps x (4 forwards + 4 backwards)
    s0 = mb.filter((pl.col("rank") == 0) & (pl.col("step") == 2)).sort("start_ns")
    assert list(zip(s0["kind"], s0["microbatch"], strict=True)) == [
        ("forward", 0), ("forward", 1), ("backward", 0), ("forward", 2),
        ("backward", 1), ("forward", 3), ("backward", 2), ("backward", 3),
    ]  # fmt: skip
    assert s0["phase"].to_list() == ["warmup"] + ["steady"] * 6 + ["cooldown"]
    assert (mb["comm_ns"] == 0).all()  # the example sends and receives outside its labels


def test_bubble_is_window_minus_work_and_phases_partition_it(pipe: PipelineResult) -> None:
    st = pipe.stages
    assert (st["bubble_ns"] == st["window_ns"] - st["busy_ns"]).all()
    assert (st["warmup_ns"] + st["steady_ns"] + st["cooldown_ns"] == st["window_ns"]).all()
    parts = st["warmup_bubble_ns"] + st["steady_bubble_ns"] + st["cooldown_bubble_ns"]
    assert (parts == st["bubble_ns"]).all()
    # both stages of one pipeline share its window
    assert (st.group_by("pipeline", "step").agg(pl.col("window_ns").n_unique())["window_ns"] == 1).all()
    assert ((st["bubble_pct"] > 0) & (st["bubble_pct"] < 100)).all()


def test_delay_before_stage1_forward_grows_stage0_bubble(pipe: PipelineResult) -> None:
    slow = _pipeline(DELAYED)

    def stage0(p: PipelineResult) -> float:
        return float(p.stages.filter(pl.col("stage") == 0)["bubble_ns"].mean())  # type: ignore[arg-type]

    grow = stage0(slow) - stage0(pipe)
    expected = 4 * 20e6  # microbatches x delay, per step
    assert grow == pytest.approx(expected, rel=0.10), grow / 1e6


def test_analyze_prints_the_bubble_table() -> None:
    out = invoke("analyze", str(RUN), "--no-critical-path").output
    assert "Pipeline bubbles per stage and step" in out
    assert "1f1b" in out and "theory %" in out


def test_report_draws_a_gantt_chart_per_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from charllm_trace.render.report import render_report, report_data

    run = load(RUN)
    page = render_report(report_data(run, analyze_run(run, OPTS)))
    charts = re.findall(r'<figure class="chart" data-chart="gantt">.*?</figure>', page, re.S)
    assert len(charts) == 2  # steps 2 and 3
    for chart in charts:  # 4 ranks x 8 bars, each labelled with its microbatch
        assert chart.count('class="mb"') == 32
        assert all(f">{k}{i}</text>" in chart for k in "FB" for i in range(4))
    assert 'id="pipeline"' in page


def test_perfetto_pipeline_track_draws_phases_and_bubbles(tmp_path, pipe: PipelineResult) -> None:  # type: ignore[no-untyped-def]
    from decimal import Decimal

    from tests.helpers.perfetto_check import assert_valid
    from tests.helpers.perfetto_check import load as load_json

    out = tmp_path / "pp.json"
    r = invoke("export", "perfetto", str(RUN), "-o", str(out), "--no-critical-path")
    assert r.exit_code == 0, r.output
    assert_valid(out)  # nests, names every track
    doc = load_json(out)
    stacks: dict[tuple[int, int], list] = {}
    spans: dict[tuple[int, int, str], int] = {}  # (rank, step, name) -> summed ns
    for e in doc["traceEvents"]:
        if e.get("cat") != "pipeline":
            continue
        key = (e["pid"], e["tid"])
        if e["ph"] == "B":
            stacks.setdefault(key, []).append(e)
        else:
            b = stacks[key].pop()
            assert b["name"] == e["name"]
            ns = int((Decimal(str(e["ts"])) - Decimal(str(b["ts"]))) * 1000)
            k = (e["pid"], b["args"]["step"], b["name"])
            spans[k] = spans.get(k, 0) + ns
    for r in pipe.stages.iter_rows(named=True):
        rank, step = r["rank"], r["step"]
        # the gaps between labels are the bubble (the example nests no communication in its labels)
        assert spans[(rank, step, "bubble")] == r["bubble_ns"]
        for name, col in (("warm-up", "warmup_ns"), ("steady", "steady_ns"), ("cool-down", "cooldown_ns")):
            assert spans.get((rank, step, name), 0) == r[col]


def test_findings_state_the_bubble_and_the_waiting_as_the_json_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from charllm_trace.analysis.findings import findings
    from tests.render.test_report_findings import _check_against_json

    out = tmp_path / "run.html"
    assert invoke("report", str(RUN), "-o", str(out)).exit_code == 0
    doc = json.loads(invoke("analyze", str(RUN), "--format", "json").stdout)
    found = findings(analyze_run(load(RUN), AnalyzeOptions()))
    by = {f.section: f for f in found}
    assert {"pipeline", "comm-wait"} <= set(by)
    assert "against 20.0 % for 1F1B with 2 stages and 4 microbatches" in by["pipeline"].text
    assert "recv (pp) ops spent" in by["comm-wait"].text and "caused" in by["comm-wait"].text
    _check_against_json(found, doc, out.read_text(encoding="utf-8"))
