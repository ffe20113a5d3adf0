"""The HTML report's "Critical path" and "What-if (PREDICTED)" sections (issue 10), and
`report --simulate` / `report --what-if`.

The figures on the page are read back from its tables and checked against the analysis
result they came from; the page stays self-contained (no script, nothing fetched)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.analysis import AnalyzeOptions, analyze_run
from charllm_trace.inputs import loader
from charllm_trace.render.report import CP_STYLE, render_report, report_data
from tests.conftest import invoke as _invoke
from tests.conftest import shared_trace


@pytest.fixture
def source(a100_or_gloo: Path) -> Path:
    return a100_or_gloo


def _section(page: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', page, re.S)
    assert m, sid
    return m.group(1)


def _tables(sec: str) -> list[list[list[str]]]:
    """Each table of a section as rows of cell texts (markup inside a cell dropped)."""
    out = []
    for t in re.findall(r"<table.*?</table>", sec, re.S):
        rows = []
        for tr in re.findall(r"<tr>(.*?)</tr>", t, re.S):
            cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)
            rows.append([html.unescape(re.sub(r"<[^>]+>", "", c)) for c in cells])
        out.append(rows)
    return out


def _ms(ns: int | None) -> str:
    return "" if ns is None else f"{ns / 1e6:,.3f}"


def _self_contained(page: str) -> None:
    assert "<script" not in page
    assert set(re.findall(r"https?://[^\s\"')]+", page)) == {"http://www.w3.org/2000/svg"}


def test_report_has_the_critical_path_and_what_if(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = _invoke("report", str(source), "-o", str(out), "--what-if", "comm=0.5,gemm=0.8")
    assert r.exit_code == 0, r.output
    page = out.read_text(encoding="utf-8")
    _self_contained(page)
    # the page's section list links to both sections
    nav = re.search(r'<nav class="toc">(.*?)</nav>', page, re.S)
    assert nav and 'href="#critical-path"' in nav.group(1) and 'href="#what-if"' in nav.group(1)

    res = analyze_run(loader.load(source), AnalyzeOptions(per_step=True, what_if={"comm": 0.5, "gemm": 0.8}))
    cp, wi = res.critical_path, res.what_if
    assert cp is not None and wi is not None
    sec = _section(page, "critical-path")
    paths, ops = _tables(sec)
    header, body = paths[0], paths[1:]
    assert header[:4] == ["path", "step", "span (ms)", "path (ms)"] and header[-1] == "breakdown"
    assert len(body) == cp.paths.height
    cats = [c for c in CP_STYLE if f"{CP_STYLE[c][0]} (ms / %)" in header]
    assert cats and all((cp.paths[f"{c}_ns"] == 0).all() for c in CP_STYLE if c not in cats)
    for got, exp in zip(body, cp.paths.iter_rows(named=True), strict=True):
        who = "job" if exp["scope"] == "job" else f"rank {exp['rank']}"
        assert got[:4] == [who, "all" if exp["step"] is None else str(exp["step"]), _ms(exp["span_ns"]),
                           _ms(exp["length_ns"])]  # fmt: skip
        for c, cell in zip(cats, got[4:-1], strict=True):
            v = exp[f"{c}_ns"]
            assert cell == f"{_ms(v)} / {100.0 * v / exp['length_ns']:.2f}"
    # one stacked bar per path, its pieces in proportion to the breakdown
    bars = re.findall(r'<svg class="stack".*?</svg>', sec, re.S)
    assert len(bars) == cp.paths.height
    for bar, exp in zip(bars, cp.paths.iter_rows(named=True), strict=True):
        widths = [float(w) for w in re.findall(r'class="piece" x="[\d.]+" y="0" width="([\d.]+)"', bar)]
        nonzero = [c for c in CP_STYLE if exp[f"{c}_ns"] > 0]
        assert len(widths) == len(nonzero)
        assert sum(widths) == pytest.approx(260, abs=0.05)  # the whole path
    # top operators of the whole-trace paths
    top = cp.top_ops.filter(pl.col("step").is_null())
    assert ops[0] == ["path", "operator", "category", "time (ms)", "% of path", "path edges"]
    got_ops = {(row[0], row[1], row[3], row[4]) for row in ops[1:]}
    exp_ops = {
        (
            "job" if r["scope"] == "job" else f"rank {r['rank']}",
            r["name"],
            _ms(r["time_ns"]),
            f"{r['pct']:.2f}",
        )
        for r in top.iter_rows(named=True)
    }
    assert got_ops == exp_ops

    w = _section(page, "what-if")
    assert "PREDICTED, not measured" in w and "comm×0.5, gemm×0.8" in w
    # the prediction with its range over steps (the WhatIfResult's figures)
    lo, hi = wi.predicted_low_ns, wi.predicted_high_ns
    assert wi.n_steps > 0 and lo is not None and hi is not None and lo <= wi.predicted_median_ns <= hi
    assert (
        f"PREDICTED step time {wi.predicted_median_ns / 1e6:,.3f} ms (median; range {lo / 1e6:,.3f}–{hi / 1e6:,.3f} ms"
        in w
    )
    (wt,) = _tables(w)
    assert len(wt) - 1 == wi.steps.height
    for got, exp in zip(wt[1:], wi.steps.iter_rows(named=True), strict=True):
        assert got[2:5] == [_ms(exp["measured_ns"]), _ms(exp["predicted_ns"]), f"{exp['change_pct']:+.2f}"]
    if wi.fixed_wait_pct is not None:
        assert f"{wi.fixed_wait_pct:.1f} % of the measured critical path is waiting" in w


def test_report_without_what_if_has_no_what_if_section(gloo_ets: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert _invoke("report", str(gloo_ets), "-o", str(out)).exit_code == 0
    page = out.read_text(encoding="utf-8")
    assert '<section id="critical-path">' in page and 'id="what-if"' not in page
    # no what-if figure: the critical path's bars sit in its table; the ranks x steps heatmaps
    # (step time, exposed communication) follow the bandwidth scatter
    assert re.findall(r'data-chart="(\w+)"', page) == ["lanes", "bar", "scatter", "heatmap", "heatmap"]


def test_report_simulate(tmp_path: Path) -> None:
    """`report --simulate` exists (the page tells users to rerun with it): a Chakra ET without
    timestamps gets a simulated timeline, critical path and what-if, labelled SIMULATED."""
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    out = tmp_path / "r.html"
    r = _invoke("report", str(src), "-o", str(out))
    assert r.exit_code == 0 and "--simulate" in r.output
    page = out.read_text(encoding="utf-8")
    assert "rerun with --simulate" in _section(page, "critical-path")
    r = _invoke("report", str(src), "-o", str(out), "--force", "--simulate", "--what-if", "gpu=0.5")
    assert r.exit_code == 0, r.output
    page = out.read_text(encoding="utf-8")
    _self_contained(page)
    assert "SIMULATED timeline" in page and "SIMULATED: times rebuilt" in _section(page, "critical-path")
    assert re.findall(r'data-chart="(\w+)"', page)[0] == "lanes"  # the simulated timeline is drawn
    (wt,) = _tables(_section(page, "what-if"))
    assert len(wt) > 1


def test_report_data_is_the_analysis(gloo_ets: Path) -> None:
    run = loader.load(gloo_ets)
    an = analyze_run(run, AnalyzeOptions(per_step=True))
    data = report_data(run, an)
    assert data.critical_paths is not None and data.critical_paths.equals(an.critical_path.paths)  # type: ignore[union-attr]
    assert data.what_if is None
    assert data.critical_ops is not None
    assert data.critical_ops.filter(pl.col("step").is_not_null()).height == 0
    page = render_report(data)
    assert page.count('<svg class="stack"') == an.critical_path.paths.height  # type: ignore[union-attr]
    an2 = analyze_run(run, AnalyzeOptions(per_step=True, critical_path=False))
    sec = _section(render_report(report_data(run, an2)), "critical-path")
    assert 'class="empty"' in sec and "<table" not in sec
