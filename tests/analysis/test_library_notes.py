"""Library results say what is true; the CLI words its own hints (issue 12 item 5).

Notes and skip reasons of ``analyze_run`` name no CLI flag; ``charllm-trace analyze`` and the
report still tell the user which flag helps. ``AnalyzeOptions`` is immutable and
``analyze_trace`` applies its keywords over given options."""

from __future__ import annotations

import ast
import dataclasses
import io
from pathlib import Path

import pytest
from rich.console import Console

import charllm_trace.analysis as analysis_pkg
from charllm_trace.analysis import AnalyzeOptions, RunAnalysis, analyze_run, analyze_trace
from charllm_trace.analysis.api import CAN_SIMULATE, NO_TIMESTAMPS
from charllm_trace.core.model import Run, Trace
from charllm_trace.inputs import loader
from charllm_trace.render.tables import cli_hint, render_analysis

GLOO = Path(__file__).parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"
CLI_WORDS = (
    "--simulate",
    "--per-step",
    "--what-if",
    "--peak-gbps",
    "--hta-compat",
    "rerun with",
    "charllm-trace ",
)


def _untimed(tr: Trace) -> Trace:
    meta = dataclasses.replace(tr.meta, has_timestamps=False)
    return Trace(nodes=tr.nodes, deps=tr.deps, telemetry=tr.telemetry, meta=meta)


def _texts(an: RunAnalysis) -> list[str]:
    out = list(an.skipped.values())
    for notes in an.notes().values():
        out += notes
    return out


@pytest.fixture(scope="module")
def untimed() -> Run:
    run = loader.load(GLOO)
    return Run({r: _untimed(t) for r, t in run.traces.items()}, manifest=run.manifest, source=run.source)


def test_library_notes_name_no_cli_flag(untimed: Run) -> None:
    timed = loader.load(GLOO)
    for an in (
        analyze_run(untimed),
        analyze_run(timed, AnalyzeOptions(per_step=True, hta_compat=True)),
        analyze_run(untimed, AnalyzeOptions(simulate=True)),
    ):
        texts = _texts(an)
        assert texts
        for t in texts:
            assert "--" not in t and not any(w in t for w in CLI_WORDS), t
    an = analyze_run(untimed)
    assert CAN_SIMULATE in an.skipped["overlap"]  # the library says a timeline can be rebuilt
    assert "analysis.simulate" in NO_TIMESTAMPS


def test_cli_tables_name_the_flag(untimed: Run) -> None:
    an = analyze_run(untimed)
    buf = io.StringIO()
    render_analysis(an, Console(file=buf, width=200))
    out = buf.getvalue()
    assert "overlap: this trace has no timestamps" in out
    assert "rerun with --simulate" in out
    assert cli_hint(an.skipped["overlap"]).endswith("rerun with --simulate")
    assert cli_hint("nothing to add") == "nothing to add"


def test_cli_analyze_and_report_name_the_flag(tmp_path: Path, untimed: Run) -> None:
    """Through the command line: an ET written without timestamps."""
    from click.testing import CliRunner

    from charllm_trace.cli.app import main
    from charllm_trace.et.writer import write_et

    tr = untimed.traces[untimed.ranks[0]]
    nodes = tr.nodes.with_columns(start_ns=None)
    et = tmp_path / "untimed.et"
    write_et(Trace(nodes=nodes, deps=tr.deps, telemetry=tr.telemetry, meta=tr.meta), et)
    assert not loader.load(et).traces[0].meta.has_timestamps
    r = CliRunner().invoke(main, ["analyze", str(et)])
    assert r.exit_code == 0, r.output
    assert "rerun with --simulate" in r.output
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", str(et), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "rerun with --simulate" in r.output
    assert "rerun with --simulate" in out.read_text(encoding="utf-8")


def test_no_cli_words_in_analysis_strings() -> None:
    """No string of the analysis modules (docstrings aside) names a CLI flag, except the parsers
    of option values (``parse_parallel``, ``parse_what_if``), which report errors in the
    option's own syntax."""
    root = Path(analysis_pkg.__file__).parent
    bad = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    docs.add(id(body[0].value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                words = (
                    "--simulate",
                    "--per-step",
                    "--peak-gbps",
                    "--hta-compat",
                    "rerun with",
                    "charllm-trace ",
                )
                if any(w in node.value for w in words):
                    bad.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert not bad, "\n".join(bad)


def test_analyze_trace_keeps_keywords_over_options() -> None:
    tr = loader.load(GLOO).traces[0]
    opts = AnalyzeOptions(hta_compat=True, critical_path=False)
    an = analyze_trace(tr, opts, per_step=True)
    assert an.options.per_step and an.options.hta_compat and not an.options.critical_path
    assert opts.per_step is False  # the caller's options are as they were
    assert an.overlap is not None and an.overlap.per_rank["step"].is_not_null().any()
    assert analyze_trace(tr, per_step=True, critical_path=False).options.per_step


def test_options_are_immutable() -> None:
    opts = AnalyzeOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.per_step = True  # type: ignore[misc]


def test_regress_analyze_leaves_the_callers_options() -> None:
    from charllm_trace.regress.api import analyze

    run = loader.load(GLOO)
    opts = AnalyzeOptions(critical_path=False)
    an = analyze(run, opts)
    assert an.options.per_step and opts == AnalyzeOptions(critical_path=False)
