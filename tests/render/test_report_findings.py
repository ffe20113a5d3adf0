"""The report says what it found (issue 14, item 1): a findings section at the top whose every
number is the one ``analyze --format json`` prints, log-scaled bandwidth with a tooltip per point
and no hidden series, step markers, power on the timeline's clock with the traced window marked,
a stragglers section; checked in headless Chromium on the shared A100 profile and a collected run."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from click.testing import CliRunner

from charllm_trace.analysis.findings import Fact, findings
from charllm_trace.cli.app import main
from tests.conftest import FIXTURES, shared_trace
from tests.render.test_report_html import _with_telemetry

RUN = FIXTURES / "cpu-2rank-gloo"


def _row(doc: dict, f: Fact) -> dict:
    rows = [r for r in doc["frames"][f.frame] if all(r.get(k) == v for k, v in f.where)]
    assert len(rows) == 1, (f, rows)
    return rows[0]


def _check_against_json(found, doc: dict, page: str) -> None:
    """Every fact of every finding is the JSON document's value, and the page prints it."""
    shown = [
        html.unescape(re.sub(r"<[^>]+>", "", li))
        for li in re.findall(r"<li data-section[^>]*>(.*?)</li>", page)
    ]
    assert len(shown) == len(found)
    for f, text in zip(found, shown, strict=True):
        assert f.text in text
        for fact in f.facts:
            assert _row(doc, fact)[fact.column] == fact.value, fact
            assert fact.text in f.text, fact


def test_findings_of_the_a100_profile_equal_the_json_and_show_in_chromium(tmp_path: Path, browser) -> None:
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.inputs import loader
    from charllm_trace.render.export import to_document
    from charllm_trace.render.report import render_report, report_data

    run, _ = _with_telemetry(loader.load(shared_trace("hta/a100_ddp_nccl_rank0.json.gz")))
    an = analyze_run(run, AnalyzeOptions(per_step=True))
    doc = json.loads(json.dumps(to_document(an), default=str))  # what analyze --format json prints
    page = render_report(report_data(run, an, title="A100"))
    found = findings(an)
    assert [f.section for f in found] == [
        "overlap",
        "overlap",
        "collective-bandwidth",
        "power-and-thermal",
        "energy",
    ]
    assert "idle for 503.1 ms (76.2 %)" in found[0].text  # the page said nothing of the 76 % idle GPU
    _check_against_json(found, doc, page)
    f = tmp_path / "a100.html"
    f.write_text(page, encoding="utf-8")
    res = browser(f, tmp_path / "a100.png")
    assert res.console_errors == [] and res.page_errors == []
    p = res.page
    assert p["sections"][0] == "findings"
    assert all(x["visible"] and x["target"] for x in p["findings"]), p["findings"]
    # a tooltip per drawn point, naming type, size, busbw and rank; one marker shape per type
    assert p["point_tooltips"] and all(
        re.match(r"(all_reduce|broadcast) · .+ GB/s · rank 0", t) for t in p["point_tooltips"]
    )
    assert len(set(p["marker_shapes"])) == len(p["marker_shapes"]) == 2
    assert "bus bandwidth (GB/s) (log scale)" in page


def test_report_of_a_collected_run_has_findings_and_stragglers(tmp_path: Path, cache_dir, browser) -> None:
    out = tmp_path / "run.html"
    r = CliRunner().invoke(main, ["report", str(RUN), "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(CliRunner().invoke(main, ["analyze", str(RUN), "--json", "--per-step"]).stdout)
    page = out.read_text(encoding="utf-8")
    from charllm_trace.analysis import AnalyzeOptions
    from charllm_trace.service import analyze

    an = analyze(str(RUN), AnalyzeOptions(per_step=True)).analysis
    found = findings(an)
    assert {f.section for f in found} >= {"overlap", "collective-bandwidth", "stragglers"}
    _check_against_json(found, doc, page)
    assert 'id="stragglers"' in page
    res = browser(out, tmp_path / "run.png")
    assert res.console_errors == [] and res.page_errors == []
    assert res.page["sections"][:2] == ["findings", "timeline"]
    assert "stragglers" in res.page["sections"]
    assert all(x["visible"] and x["target"] for x in res.page["findings"])
    assert res.pixel_std > 10


def test_findings_of_the_h200_run_one_rank_groups_and_energy_per_step(tmp_path: Path, cache_dir) -> None:
    """The real H200 run: its collectives are in a one-rank group (busbw 0 by definition, so the
    finding gives algorithm bandwidth, not '0.00 GB/s, 0.0 % of the NVLink peak'), and the energy
    finding gives the traced steps' operator energy, not a mean that counted the (idle) row."""
    run = FIXTURES / "h200-1rank-nccl"
    out = tmp_path / "h200.html"
    r = CliRunner().invoke(main, ["report", str(run), "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(CliRunner().invoke(main, ["analyze", str(run), "--json", "--per-step"]).stdout)
    from charllm_trace.analysis import AnalyzeOptions
    from charllm_trace.service import analyze

    found = findings(analyze(str(run), AnalyzeOptions(per_step=True)).analysis)
    _check_against_json(found, doc, out.read_text(encoding="utf-8"))
    text = {f.section: f.text for f in found}
    assert "28 collectives ran in groups of one rank" in text["collective-bandwidth"]
    assert "2,097 GB/s of algorithm bandwidth (all_gather" in text["collective-bandwidth"]
    assert "NVLink" not in text["collective-bandwidth"]
    assert "4,355.0 J" in text["energy"] and "4 traced steps used 85.1 J to 150.7 J" in text["energy"]
