"""The HTML report: chart primitives and the `report` command, checked in a real headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from charllm_trace.render import html as H
from charllm_trace.render import svg


def _primitives_page() -> tuple[str, dict[str, int]]:
    """A page with every primitive, and the number of marks each must draw (from the inputs)."""
    rng = np.random.default_rng(7)
    t = np.arange(0, 2_000_000_000, 10_000_000, dtype=np.float64)  # 2 s at 100 Hz, ns offsets
    power = 300 + 80 * np.sin(t / 2e8) + rng.normal(0, 5, t.size)
    temp = 60 + t / 1e9 * 4
    clock = np.where((t > 5e8) & (t < 8e8), 1410.0, 1980.0)
    spans = [H.Span(5e8, 8e8, "sw_power_cap"), H.Span(1.5e9, 1.6e9, "hw_slowdown")]
    line = H.line_chart(
        [
            H.Series("power (W)", t, power),
            H.Series("temperature (C)", t, temp),
            H.Series("SM clock (MHz)", t, clock, axis="right"),
        ],
        title="Power, temperature and SM clock",
        y_label="W / C",
        y2_label="MHz",
        spans=spans,
        span_label="throttled",
    )
    # 2 ranks x (compute, communication, idle); 200k compute intervals to exercise pixel merging
    n = 200_000
    cs = np.sort(rng.integers(0, 2_000_000_000, n)).astype(np.float64)
    lanes = [
        H.Lane(
            f"rank {r}",
            [
                H.LaneRow("compute", cs, cs + 3_000),
                H.LaneRow("communication", np.arange(0, 2e9, 2e8) + r * 1e7, np.arange(0, 2e9, 2e8) + 9e7),
                H.LaneRow("idle", [1.9e9], [2.0e9]),
            ],
        )
        for r in range(2)
    ]
    lanes_html = H.lanes_chart(
        lanes,
        title="Timeline",
        x_range=(0.0, 2e9),
        overlay=[H.Series("GPU0 power", t, power), H.Series("GPU1 power", t, power - 30)],
        overlay_label="W",
    )
    cats = [f"aten::op_{i}" for i in range(12)]
    bars = H.bar_chart(cats, {"energy (J)": rng.uniform(1, 100, 12)}, title="Energy by operator", x_label="J")
    grouped = H.bar_chart(
        ["step 1", "step 2", "step 3"],
        {"rank 0": [40, 55, 61], "rank 1": [38, 52, 66.5]},
        title="Overlap per step",
        x_label="%",
    )
    sizes = 2.0 ** rng.integers(10, 30, 300)
    scatter = H.scatter_chart(
        [
            H.Series("all_reduce", sizes[:200], rng.uniform(10, 200, 200)),
            H.Series("all_gather", sizes[200:], rng.uniform(5, 150, 100)),
        ],
        title="Bus bandwidth vs message size",
        x_label="message size",
        y_label="GB/s",
        hlines=[H.HLine(450.0, "NVLink peak 450 GB/s")],
    )
    nothing = H.empty("Energy by operator (rank 3)", "no telemetry in this trace")
    rep = H.HtmlReport("Primitives", "synthetic data")
    rep.add("lines", line)
    rep.add("lanes", lanes_html)
    rep.add("bars", bars, grouped, H.table(["a", "b"], [["x", 1], ["y", 2]]))
    rep.add("scatter", scatter, nothing, note="a note")
    # marks the page must draw, from the inputs: series + spans, lane rows + overlays, bars, groups + line
    groups = re.findall(r'<g class="points"[^>]*>(.*?)</g>', scatter)
    circles = sum(g.count("<title>") for g in groups)  # one marker (and tooltip) per drawn point
    assert 0 < circles <= 300  # points on the same pixel are drawn once
    assert (
        len(groups) == 2 and "<circle" in groups[0] and "<rect" in groups[1]
    )  # a shape per group, the larger drawn first
    expect = {
        "line": 3 + 2,
        "lanes_rows": 2 * 3,
        "lanes_series": 2,
        "bar": 12,
        "bar2": 6,
        "scatter": circles + 1,
    }
    return rep.render(), expect


def test_reduce_line_keeps_extremes_and_order() -> None:
    x = np.linspace(0, 100, 100_000)
    y = np.sin(x) * 10
    px, py = svg.reduce_line(x * 9.0, y, 960)
    assert px.size < 5 * 960
    assert py.max() == y.max() and py.min() == y.min()
    assert np.all(np.diff(px) >= 0)


def test_coverage_is_the_share_of_each_pixel_column() -> None:
    cov = svg.coverage(np.array([0.0, 2.5, 7.0, 7.5]), np.array([1.0, 3.5, 10.0, 9.0]), 0.0, 10.0, 5)
    assert cov.tolist() == [0.5, 0.5, 0.0, 0.5, 1.0]  # overlapping intervals count once


def test_merge_px_joins_intervals_on_the_same_pixel() -> None:
    a, b = svg.merge_px(np.array([0.2, 0.4, 5.0, 5.5, 9.0]), np.array([0.3, 0.6, 5.2, 7.1, 9.1]))
    assert a.tolist() == [0.0, 5.0, 9.0] and b.tolist() == [1.0, 8.0, 10.0]


def test_page_is_self_contained() -> None:
    page, _ = _primitives_page()
    assert "<script" not in page
    # the only URL in the page is the SVG namespace
    assert set(re.findall(r"https?://[^\s\"')]+", page)) == {"http://www.w3.org/2000/svg"}
    assert len(page) < 2_000_000  # 200k intervals were merged to pixels


def test_primitives_render_in_chromium(tmp_path: Path, browser) -> None:
    page, expect = _primitives_page()
    f = tmp_path / "primitives.html"
    f.write_text(page, encoding="utf-8")
    res = browser(f, tmp_path / "primitives.png")
    assert res.console_errors == [] and res.page_errors == []
    assert res.requests == [f.resolve().as_uri()]  # nothing fetched
    figs = res.figures
    assert [x["kind"] for x in figs] == ["line", "lanes", "bar", "bar", "scatter", "empty"]
    for fig in figs[:-1]:
        assert fig["svg_w"] > 900 and fig["svg_h"] > 100, fig
        assert fig["drawn"] == fig["marks"] > 0, fig
    assert figs[0]["marks"] == expect["line"]
    assert figs[1]["rows"] == expect["lanes_rows"] and figs[1]["series"] == expect["lanes_series"]
    assert figs[2]["marks"] == expect["bar"]
    assert figs[3]["marks"] == expect["bar2"]
    assert figs[4]["marks"] == expect["scatter"]
    assert res.pixel_std > 10 and res.distinct_colors > 20


# ---------------------------------------------------------------------------
# The report wired to the analyses
# ---------------------------------------------------------------------------

A100 = "hta/a100_ddp_nccl_rank0.json.gz"


def _raw_counts(path: Path) -> tuple[int, dict[str, int]]:
    """ProfilerSteps and collective kernels per type, read straight from the Kineto JSON."""
    import gzip
    import json
    from collections import Counter

    doc = json.loads(gzip.decompress(path.read_bytes()))
    ev = doc["traceEvents"]
    steps = {e["name"] for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")}
    colls = Counter(
        e["args"]["Collective name"]
        for e in ev
        if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})
    )
    return len(steps), dict(colls)


def _with_telemetry(run, period_ns: int = 10_000_000):
    """The run's rank with a 100 Hz telemetry stream over its span; every 20th..23rd sample is
    power-capped (NVML reason 0x4). Returns the run and the number of throttle periods."""
    import polars as pl

    from charllm_trace.core.model import Run, Trace

    (rank,) = run.ranks
    tr = run.traces[rank]
    s0 = int(tr.nodes["start_ns"].min())
    s1 = int((tr.nodes["start_ns"] + tr.nodes["dur_ns"]).max())
    t = np.arange(s0 - period_ns // 2, s1 + period_ns, period_ns, dtype=np.int64)
    i = np.arange(t.size)
    capped = i % 20 < 4
    tel = pl.DataFrame(
        {
            "time_ns": t,
            "device": [tr.meta.device_index or 0] * t.size,
            "power_w": 250 + 100 * np.sin(i / 3.0),
            "temp_c": 60 + 0.2 * i,
            "sm_clock_mhz": np.where(capped, 1200.0, 1410.0),
            "power_limit_w": [400.0] * t.size,
            "throttle_reasons": np.where(capped, 0x4, 0),
        }
    )
    periods = int(np.sum(np.diff(np.r_[0, capped.astype(int)]) == 1))
    return Run(
        {rank: Trace(nodes=tr.nodes, deps=tr.deps, telemetry=tel, meta=tr.meta)}, source=run.source
    ), periods


def test_report_of_a_real_trace_in_chromium(tmp_path: Path, browser) -> None:
    from tests.conftest import shared_trace

    src = shared_trace(A100)
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.inputs import loader
    from charllm_trace.render.report import render_report, report_data

    run, periods = _with_telemetry(loader.load(src))
    an = analyze_run(run, AnalyzeOptions(per_step=True))
    assert set(an.skipped) <= {"pipeline", "comm_wait", "dims"}  # one rank, no microbatch labels, no layout
    page = render_report(report_data(run, an, title="A100 DDP"))
    assert "<script" not in page
    assert str(src.parent) not in page and src.name in page  # the input's name, never its path
    f = tmp_path / "report.html"
    f.write_text(page, encoding="utf-8")
    res = browser(f, tmp_path / "report.png")
    assert res.console_errors == [] and res.page_errors == []
    assert res.requests == [f.resolve().as_uri()]
    kinds = [x["kind"] for x in res.figures]
    assert kinds == ["lanes", "bar", "line", "scatter", "bar", "line", "line"], kinds
    for fig in res.figures:
        assert fig["drawn"] == fig["marks"] > 0 and fig["svg_w"] > 900, fig
    lanes, steps_bar, queue, scatter, energy_bar, line, clock = res.figures
    assert queue["series"] == 2  # the launch queue of the rank: mean and maximum per bin
    n_steps, colls = _raw_counts(src)
    assert lanes["rows"] == 3 and lanes["series"] == 1  # compute, communication, idle rows + the power line
    assert (
        page.count('<line class="mark"') == 3 * n_steps
    )  # step starts on the timeline and both power charts
    assert steps_bar["marks"] == n_steps == 3  # one bar per ProfilerStep
    # one group per collective type, each point counted in the legend: as many as kernels in the input
    legend = re.findall(r"(all_reduce|broadcast) \((\d+)\)", page)
    assert {k: int(v) for k, v in legend} == {
        "all_reduce": colls["allreduce"],
        "broadcast": colls["broadcast"],
    }
    assert "peak 300 GB/s" in page  # the A100's NVLink peak line is drawn
    assert energy_bar["marks"] >= 3
    # power (W) and temperature (°C, its own axis) + a span per throttle period + the traced window +
    # a line per step start; the SM clock (MHz) in its own chart with the same spans and marks
    assert line["marks"] == 2 + periods + 1 + n_steps and clock["marks"] == 1 + periods + 1 + n_steps
    assert "temperature (°C)" in page and "W / °C" not in page and "traced window" in page
    assert res.pixel_std > 10 and res.distinct_colors > 20


def test_report_command_on_a_two_rank_run(tmp_path: Path, browser) -> None:
    from click.testing import CliRunner

    from charllm_trace.cli.app import main
    from tests.conftest import shared_trace

    src = shared_trace("hta/trace_filter_2ranks/rank-0.json.gz").parent
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "no telemetry" in res.output  # energy and power say why they are not drawn
    page = out.read_text(encoding="utf-8")
    assert page.count('data-chart="lanes"') == 1 and "rank 0" in page and "rank 1" in page
    assert page.count("no telemetry in this trace") >= 2  # energy and power sections
    res = CliRunner().invoke(main, ["report", str(src), "-o", str(out)])
    assert res.exit_code == 2 and "already exists" in res.output
    shown = browser(out, tmp_path / "r.png")
    assert shown.console_errors == [] and shown.page_errors == []
    lanes = shown.figures[0]
    assert lanes["kind"] == "lanes" and lanes["drawn"] == lanes["marks"] > 0
    assert lanes["rows"] == 2 * 3  # two ranks: compute, communication, idle
    assert shown.pixel_std > 10
