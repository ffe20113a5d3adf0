"""`analyze` shows the critical path and the what-if replay (issue 10): tables, JSON, bad input.

Inputs: the shared A100 DDP profile (skipped when ../shared is absent) and our own 2-rank
gloo fixture, converted to ETs first. Every figure shown is checked against the analysis
result it came from (the renderers format, they do not compute)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from rich.console import Console

from charllm_trace.analysis import AnalyzeOptions, analyze_run
from charllm_trace.analysis.results import (
    CRITICAL_OPS_SCHEMA,
    CRITICAL_PATH_SCHEMA,
    WHATIF_SCHEMA,
    RunAnalysis,
)
from charllm_trace.cli.app import main
from charllm_trace.inputs import loader
from charllm_trace.render.tables import render_analysis
from tests.conftest import invoke as _invoke
from tests.conftest import shared_trace


@pytest.fixture
def source(a100_or_gloo: Path) -> Path:
    return a100_or_gloo


def _ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def _rows(text: str, title: str) -> list[list[str]]:
    """The body rows of the table titled ``title`` in rich's compact layout (cells split on blanks)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(title))
    rule = next(i for i in range(start, len(lines)) if set(lines[i].strip()) == {"─"})
    out = []
    for ln in lines[rule + 1 :]:
        if not ln.strip():
            continue  # a blank line (between the sections of a table, or after it)
        if not re.match(r"\s*(\d+|job)\s", ln):
            break  # the next title, a legend or a note: the table has ended
        out.append(ln.split())
    return out


def _table_text(res: RunAnalysis, width: int) -> str:
    con = Console(width=width, file=io.StringIO(), color_system=None)
    render_analysis(res, con)
    return con.file.getvalue()  # type: ignore[attr-defined]


def test_critical_path_table_matches_the_analysis(source: Path) -> None:
    r = _invoke("analyze", str(source), "--per-step")
    assert r.exit_code == 0, r.output
    res = analyze_run(loader.load(source), AnalyzeOptions(per_step=True))
    cp = res.critical_path
    assert cp is not None and cp.paths.height >= 2
    out = r.output
    rows = _rows(out, "Critical path: share of the path by category")
    assert len(rows) == cp.paths.height
    for got, exp in zip(rows, cp.paths.iter_rows(named=True), strict=True):
        who = "job" if exp["scope"] == "job" else str(exp["rank"])
        step = "all" if exp["step"] is None else str(exp["step"])
        assert got[:4] == [who, step, _ms(exp["span_ns"]), _ms(exp["length_ns"])]
    # the time table: every category shown in ms, equal to the frame's
    header = next(ln for ln in out.splitlines() if ln.lstrip().startswith("rank") and "cpu ms" in ln)
    shown = header.split()[2::2]  # "gpu", "comm", ... (each followed by "ms")
    names = {"gpu": "gpu_compute", "mem": "gpu_memory", "comm": "communication", "cpu": "cpu_op",
             "launch": "launch", "wait": "sync_wait", "idle": "idle"}  # fmt: skip
    ms_rows = _rows(out, "Critical path: time by category (ms)")
    for got, exp in zip(ms_rows, cp.paths.iter_rows(named=True), strict=True):
        assert got[2:] == [_ms(exp[f"{names[c]}_ns"]) for c in shown]
        # the breakdown adds up to the path's length (so the % columns sum to 100)
        assert sum(exp[f"{c}_ns"] for c in names.values()) == exp["length_ns"]
    # categories left out are 0 on every path
    for c in set(names) - set(shown):
        assert (cp.paths[f"{names[c]}_ns"] == 0).all()
    # top operators of the whole-trace paths, with their ms and share
    ops = cp.top_ops.filter(pl.col("step").is_null())
    assert "Top operators on the critical path (whole trace)" in out
    for row in ops.iter_rows(named=True):
        line = f"{_ms(row['time_ns'])}  {row['pct']:6.1f}"
        assert any(line in ln and ln.rstrip().endswith(str(row["count"])) for ln in out.splitlines()), line


def test_tables_fit_80_columns(source: Path) -> None:
    res = analyze_run(loader.load(source), AnalyzeOptions(per_step=True, what_if={"comm": 0.5, "gemm": 0.8}))
    text = _table_text(res, 80)
    assert max(len(ln) for ln in text.splitlines()) <= 80
    # one line per row, nothing cut: the same rows as at 200 columns
    wide = _table_text(res, 200)
    for title in (
        "Critical path: share of the path by category",
        "Critical path: time by category (ms)",
        "What-if (PREDICTED): comm×0.5, gemm×0.8",
    ):
        assert _rows(text, title) == _rows(wide, title), title
    for h in ("span ms", "path ms", "cpu %", "meas ms", "pred ms", "chg %"):
        assert h in text
    # notes come once, even though both graph analyses carry them
    for note in res.critical_path.notes:  # type: ignore[union-attr]
        assert text.count(note[:60]) == 1


def test_what_if_table_and_json(source: Path) -> None:
    r = _invoke("analyze", str(source), "--per-step", "--what-if", "comm=0.5,launch=0")
    assert r.exit_code == 0, r.output
    assert "What-if (PREDICTED): comm×0.5, launch×0" in r.output
    res = analyze_run(
        loader.load(source), AnalyzeOptions(per_step=True, what_if={"comm": 0.5, "launch": 0.0})
    )
    wi = res.what_if
    assert wi is not None
    rows = _rows(r.output, "What-if (PREDICTED)")
    assert len(rows) == wi.steps.height
    for got, exp in zip(rows, wi.steps.iter_rows(named=True), strict=True):
        assert got[:4] == [
            str(exp["rank"]),
            "all" if exp["step"] is None else str(exp["step"]),
            _ms(exp["measured_ns"]),
            _ms(exp["predicted_ns"]),
        ]
        assert got[4] == f"{exp['change_pct']:+.1f}"
        assert got[5:7] == [_ms(exp["measured_exposed_comm_ns"]), _ms(exp["predicted_exposed_comm_ns"])]
    if wi.fixed_wait_pct is not None:
        assert f"{wi.fixed_wait_pct:.1f} % of the measured critical path is waiting" in r.output

    j = _invoke("analyze", str(source), "--per-step", "--what-if", "comm=0.5,launch=0", "--format", "json")
    assert j.exit_code == 0, j.output
    doc = json.loads(j.output)
    frames = doc["frames"]
    for name, schema in (
        ("critical_path", CRITICAL_PATH_SCHEMA),
        ("critical_path_ops", CRITICAL_OPS_SCHEMA),
        ("what_if", WHATIF_SCHEMA),
    ):
        assert frames[name], name
        assert all(list(row) == list(schema) for row in frames[name]), name
    assert frames["critical_path"] == res.critical_path.paths.to_dicts()  # type: ignore[union-attr]
    assert frames["critical_path_ops"] == res.critical_path.top_ops.to_dicts()  # type: ignore[union-attr]
    assert frames["what_if"] == wi.steps.to_dicts()
    assert doc["what_if"]["predicted"] is True
    assert doc["what_if"]["factors"] == {"comm": 0.5, "launch": 0.0}
    assert doc["options"]["what_if"] == {"comm": 0.5, "launch": 0.0}
    if res.critical_path.notes:  # type: ignore[union-attr]
        assert doc["notes"]["critical_path"] == res.critical_path.notes  # type: ignore[union-attr]


def test_what_if_factor_one_predicts_the_measured_times(source: Path) -> None:
    j = _invoke("analyze", str(source), "--per-step", "--what-if", "comm=1", "--format", "json")
    assert j.exit_code == 0, j.output
    rows = json.loads(j.output)["frames"]["what_if"]
    assert rows and all(r["predicted_ns"] == r["measured_ns"] for r in rows)
    assert all(r["change_pct"] == 0.0 for r in rows)
    t = _invoke("analyze", str(source), "--per-step", "--what-if", "comm=1")
    assert all(row[4] == "+0.0" for row in _rows(t.output, "What-if (PREDICTED)"))


@pytest.mark.parametrize(
    "text, says",
    [
        ("comm=x", "is not a number"),
        ("foo=1", "unknown key 'foo'"),
        ("comm", "is not NAME=FACTOR"),
        ("comm=-1", "must be a finite number > 0"),
        ("gemm=0", "must be a finite number > 0"),
        ("launch=-1", "must be a finite number >= 0"),
        ("comm=inf", "is not a finite number"),
        ("dp=nanGB/s", "is not a finite number"),
        ("dp=0GB/s", "must be > 0 GB/s"),
        ("gemm=5GB/s", "a bandwidth applies to comm or"),
        ("cpu_op+=5", "is not a time with a unit"),
        ("cpu_op+=-5us", "must be > 0"),
        ("gemm+=5us", "'+=' applies to cpu_op"),
        ("comm=2,comm=100GB/s", "comm is given twice"),
        ("", "give at least one key"),
    ],
)
def test_bad_what_if_is_one_line_exit_2(gloo_ets: Path, tmp_path: Path, text: str, says: str) -> None:
    for cmd in (
        ["analyze", str(gloo_ets), "--what-if", text],
        ["report", str(gloo_ets), "-o", str(tmp_path / "r.html"), "--what-if", text],
    ):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --what-if") and says in lines[0], r.output
    assert not (tmp_path / "r.html").exists()


def test_no_critical_path(gloo_ets: Path) -> None:
    r = _invoke("analyze", str(gloo_ets), "--no-critical-path")
    assert r.exit_code == 0, r.output
    assert "Critical path" not in r.output and "Compute / communication overlap" in r.output
    j = json.loads(_invoke("analyze", str(gloo_ets), "--no-critical-path", "--format", "json").output)
    # the JSON contract: every frame is present, empty, and skipped says why (docs/schema/README.md)
    assert j["frames"]["critical_path"] == [] and j["skipped"]["critical_path"] == "not requested"
    assert j["options"]["critical_path"] is False


def test_help_names_the_classes() -> None:
    out = _invoke("analyze", "--help").output
    flat = re.sub(r"\s+", " ", out)
    for word in ("--what-if", "--no-critical-path", "gemm, attention, elementwise, kernel, comm, memcpy",
                 "gemm=2,comm=0.5,launch=0", "cpu_all", "tp/cp/dp/pp/ep=FACTOR", "dp=50GB/s",
                 "cpu_op+=50us"):  # fmt: skip
        assert word in flat, word
    rep = re.sub(r"\s+", " ", _invoke("report", "--help").output)
    assert "--what-if" in rep and "--simulate" in rep
    assert "--no-critical-path" in _invoke("export", "perfetto", "--help").output


def test_many_ranks_list_the_jobs_top_operators() -> None:
    """With more than 4 ranks (the shared 8-rank DLRM run) the table lists the operators of the
    job's critical path only, and says where each rank's list is."""
    src = shared_trace("param/dlrm_8ranks_v100")
    r = _invoke("analyze", str(src))
    assert r.exit_code == 0, r.output
    assert "Top operators on the critical path (whole trace, job path)" in r.output
    assert "--format json (frame critical_path_ops)" in r.output
    rows = _rows(r.output, "Top operators on the critical path")
    res = analyze_run(loader.load(src))
    job = res.critical_path.top_ops.filter((pl.col("scope") == "job") & pl.col("step").is_null())  # type: ignore[union-attr]
    assert len(rows) == job.height > 0 and all(row[0] == "job" for row in rows)
    # every whole-trace path of the 8 ranks and the job's is in the path table (steps: --per-step)
    paths = _rows(r.output, "Critical path: share of the path by category")
    assert [p[:2] for p in paths] == [[str(k), "all"] for k in range(8)] + [["job", "all"]]
    steps = _rows(
        _invoke("analyze", str(src), "--per-step").output, "Critical path: share of the path by category"
    )
    per_step = analyze_run(loader.load(src), AnalyzeOptions(per_step=True)).critical_path
    assert len(steps) == per_step.paths.height > len(paths)  # type: ignore[union-attr]
