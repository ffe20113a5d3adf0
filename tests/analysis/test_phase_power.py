"""Power per microbatch phase and the power excursion per step (analysis/phase_power.py) on a
SYNTHETIC pipeline whose power is known in every phase (the timeline of tests/test_pipeline.py:
2 stages, 4 microbatches, 1F1B, forward 1 ms, backward 2 ms; each stage draws 300 W in its
forwards, 500 W in its backwards and 100 W otherwise), and the excursions of the real H200 run
(tests/fixtures/traces/h200-1rank-nccl: one rank, no pipeline, peaks above its 700 W limit)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from charllm_trace.analysis.api import analyze_run
from charllm_trace.analysis.findings import findings
from charllm_trace.analysis.results import AnalyzeOptions, RunAnalysis
from charllm_trace.core.model import Run
from charllm_trace.inputs.loader import load
from tests.analysis.test_pipeline import MS, pipeline_run, timeline
from tests.conftest import FIXTURES
from tests.helpers.analysis_helpers import T0, make_trace

WATTS = {"F": 300.0, "B": 500.0}
IDLE_W, LIMIT_W = 100.0, 450.0
STEP = AnalyzeOptions(critical_path=False, energy_method="step", per_step=True)


def _with_power(run: Run, tl: dict, p: int) -> Run:
    """Every 0.1 ms a sample of the stage's power (held to the next: the step method is exact)."""
    end = max(e for _, e in tl.values()) + MS
    traces = {}
    for s in range(p):
        times = list(range(0, end + 1, MS // 10))
        spans = [(a, b, WATTS[k]) for (st, k, _i), (a, b) in tl.items() if st == s]
        watts = [next((w for a, b, w in spans if a <= t < b), IDLE_W) for t in times]
        tel = {"time_ns": [T0 + t for t in times], "device": [0] * len(times), "power_w": watts,
               "power_limit_w": [LIMIT_W] * len(times)}  # fmt: skip
        tr = run.traces[s]
        traces[s] = make_trace(
            tr.nodes.to_dicts(), rank=s, telemetry=tel, process_groups=tr.meta.process_groups
        )
    return Run(traces=traces)


MM_FLOP = 2 * 64 * 512 * 512  # aten::mm [64, 512] x [512, 512]


def _with_matmuls(run: Run) -> Run:
    """One counted aten::mm in every forward label and two in every backward label."""
    traces = {}
    for r, tr in run.traces.items():
        rows = tr.nodes.to_dicts()
        for lab in [x for x in rows if x["name"].startswith(("forward_mb", "backward_mb"))]:
            for k in range(1 if lab["name"].startswith("forward") else 2):
                rows.append({**lab, "id": len(rows) + 100, "name": "aten::mm", "parent": lab["id"],
                             "start_ns": lab["start_ns"] + 100 + k * 200_000, "dur_ns": 100_000,
                             "inputs": {"values": None, "shapes": json.dumps([[64, 512], [512, 512]]),
                                        "types": json.dumps(["Tensor(float)"] * 2)}})  # fmt: skip
        traces[r] = make_trace(rows, rank=r, process_groups=tr.meta.process_groups)
    return Run(traces=traces)


@pytest.fixture(scope="module")
def synthetic() -> RunAnalysis:
    tl = timeline(2, 4, MS, 2 * MS)
    return analyze_run(_with_power(_with_matmuls(pipeline_run(tl, 2)), tl, 2), STEP)


def test_each_phase_has_its_power_and_energy(synthetic: RunAnalysis) -> None:
    assert synthetic.phase_power is not None, synthetic.skipped
    ph = synthetic.phase_power.phases
    assert ph.height == 6  # 2 stages x (forward, backward, bubble)
    for r in ph.iter_rows(named=True):
        want = {"forward": 300.0, "backward": 500.0, "bubble": IDLE_W}[r["phase"]]
        assert r["avg_w"] == pytest.approx(want), r
        assert r["energy_j"] == pytest.approx(want * r["time_ns"] * 1e-9), r
        assert r["covered_ns"] == r["time_ns"]
    by = {(r["stage"], r["phase"]): r for r in ph.iter_rows(named=True)}
    # window 15 ms: 4 forwards of 1 ms, 4 backwards of 2 ms, 3 ms of bubble on each stage
    assert [by[(0, k)]["time_ns"] for k in ("forward", "backward", "bubble")] == [4 * MS, 8 * MS, 3 * MS]
    assert by[(0, "forward")]["count"] == 4 and by[(0, "bubble")]["count"] is None
    # FLOPs of the counted ops in the spans: one mm per forward, two per backward, none in the bubble
    for s in (0, 1):
        assert [by[(s, k)]["flop"] for k in ("forward", "backward", "bubble")] == [
            4 * MM_FLOP,
            8 * MM_FLOP,
            0,
        ]
        assert by[(s, "forward")]["flops_per_s"] == pytest.approx(4 * MM_FLOP / 4e-3)
        assert by[(s, "backward")]["flops_per_s"] == pytest.approx(8 * MM_FLOP / 8e-3)
    # the bubble is the pipeline view's (no communication nested in the labels here)
    assert synthetic.pipeline is not None
    st = synthetic.pipeline.stages.sort("stage")
    assert [by[(s, "bubble")]["time_ns"] for s in (0, 1)] == st["bubble_ns"].to_list()


def test_excursion_per_step_and_the_finding(synthetic: RunAnalysis) -> None:
    assert synthetic.phase_power is not None
    ex = synthetic.phase_power.excursions.filter(pl.col("step").is_not_null())
    assert ex.height == 2  # one step per rank
    for r in ex.iter_rows(named=True):
        assert r["peak_w"] == 500.0 and r["power_limit_w"] == LIMIT_W
        assert r["excursion_w"] == pytest.approx(500.0 - r["avg_w"])
        assert r["over_limit_w"] == pytest.approx(50.0) and r["exceeds_limit"] is True
        assert r["above_limit_ns"] == 8 * MS  # the backwards: 4 x 2 ms at 500 W >= 450 W
    texts = [f.text for f in findings(synthetic) if f.section == "power-phases"]
    assert len(texts) == 1 and "above its 450 W power limit" in texts[0], texts


def test_no_telemetry_no_result() -> None:
    tl = timeline(2, 4, MS, 2 * MS)
    res = analyze_run(pipeline_run(tl, 2), STEP)
    assert res.phase_power is None and res.skipped["phase_power"] == res.skipped["power"]


def test_real_h200_run_peaks_above_its_limit() -> None:
    res = analyze_run(load(FIXTURES / "h200-1rank-nccl"), STEP)
    assert res.phase_power is not None and res.power is not None
    assert res.phase_power.phases.height == 0  # one rank, no pipeline
    ex = res.phase_power.excursions
    assert ex.height == res.power.per_step.height
    steps = ex.filter(pl.col("step").is_not_null())
    assert steps["exceeds_limit"].all() and (steps["over_limit_w"] > 0).all()
    assert ((steps["excursion_w"] - (steps["peak_w"] - steps["avg_w"])).abs() < 1e-9).all()
    assert any(f.section == "power-phases" for f in findings(res))


def test_report_and_terminal_show_the_phases(synthetic: RunAnalysis) -> None:
    from charllm_trace.render.report import render_report, report_data

    tl = timeline(2, 4, MS, 2 * MS)
    run = _with_power(pipeline_run(tl, 2), tl, 2)
    page = render_report(report_data(run, synthetic))
    assert (
        'id="power-phases"' in page and 'href="#power-phases"' in page
    )  # the section, and the finding's link
    assert "peak - limit W" in page and ">bubble<" in page


def test_analyze_prints_the_excursions_of_the_h200_run() -> None:
    from tests.conftest import invoke

    out = invoke(
        "analyze", str(FIXTURES / "h200-1rank-nccl"), "--per-step", "--no-critical-path", "--no-cache"
    )
    assert out.exit_code == 0, out.output
    assert "Power excursion per step" in out.output and "Power per microbatch phase" not in out.output


def test_report_of_a_run_without_pipeline_shows_the_excursions() -> None:
    from charllm_trace.render.report import render_report, report_data

    run = load(FIXTURES / "h200-1rank-nccl")
    page = render_report(report_data(run, analyze_run(run, STEP)))
    assert 'id="power-phases"' in page and "<h2>Power excursions per step</h2>" in page
    assert "<h2>Power per microbatch phase</h2>" not in page
