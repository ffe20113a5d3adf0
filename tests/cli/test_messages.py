"""Messages that misled (issue 14, item 6): each now says what is true and the next step that works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from charllm_trace.analysis import AnalyzeOptions, analyze_run
from charllm_trace.cli.app import main
from charllm_trace.core.model import Run
from tests.analysis.test_analysis_energy import _energy_trace, _tel
from tests.conftest import shared_trace
from tests.helpers.analysis_helpers import kernel, make_trace

ROOT = Path(__file__).resolve().parents[2]


def _host_et_alone(tmp_path: Path) -> Path:
    out = tmp_path / "et"
    r = CliRunner().invoke(
        main, ["convert", str(shared_trace("param/dlrm_8ranks_v100/host_et_rank0.json.gz")), "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    return out


def test_a_host_et_alone_says_its_collectives_have_no_durations(tmp_path, cache_dir) -> None:
    """It said "no collectives in this trace" while info listed them."""
    et = _host_et_alone(tmp_path)
    doc = json.loads(CliRunner().invoke(main, ["analyze", str(et), "--json"]).stdout)
    why = doc["skipped"]["bandwidth"]
    assert why.startswith("8 collectives, but none has a duration"), why
    text = CliRunner().invoke(main, ["analyze", "--wide", str(et)]).stdout
    assert "--host-et" in text  # the command that gives it durations


def test_simulate_without_durations_says_so_instead_of_an_all_zero_table(tmp_path, cache_dir) -> None:
    et = _host_et_alone(tmp_path)
    r = CliRunner().invoke(main, ["analyze", "--wide", str(et), "--simulate"])
    assert r.exit_code == 0, r.output
    assert "0.000       0.000" not in r.stdout and "SIMULATED" not in r.stdout
    assert "neither times nor durations" in r.stdout
    doc = json.loads(CliRunner().invoke(main, ["analyze", str(et), "--simulate", "--json"]).stdout)
    assert doc["frames"]["overlap"] == [] and "neither times nor durations" in doc["skipped"]["overlap"]
    assert doc["simulated"] is False


def test_telemetry_without_power_is_not_called_no_telemetry() -> None:
    """A CPU run with 1,083 samples per device said "no telemetry in this trace"."""
    n = 1083
    tel = _tel(list(range(0, n * 1000, 1000)), [None] * n, temp_c=[40.0] * n)
    tr = make_trace([kernel(1, "gemm", 0, 10)], telemetry=tel)
    an = analyze_run(Run.single(tr), AnalyzeOptions(critical_path=False))
    assert an.energy is None
    assert an.skipped["energy"].startswith("1,083 telemetry samples, but none has a power reading")
    assert "temp_c" in an.skipped["energy"]


def test_a_large_counter_correction_is_a_warning(cache_dir) -> None:
    from charllm_trace.analysis.energy import energy

    small = energy(_energy_trace(counter=[1000.0, 1150.0, 1315.0]))  # x1.05: a note
    assert not any(n.startswith("WARNING") for n in small.notes)
    big = energy(_energy_trace(counter=[1000.0, 1300.0, 1597.0]))  # x1.99
    (w,) = [n for n in big.notes if n.startswith("WARNING")]
    assert "x1.9900" in w and "disagree" in w
    from io import StringIO

    from rich.console import Console

    from charllm_trace.render.tables import render_analysis

    tr = _energy_trace(counter=[1000.0, 1300.0, 1597.0])
    an = analyze_run(Run.single(tr), AnalyzeOptions(critical_path=False))
    buf = StringIO()
    render_analysis(an, Console(file=buf, width=300))
    lines = [ln for ln in buf.getvalue().splitlines() if "disagree" in ln]
    assert lines and lines[0].strip().startswith("warning:"), lines


def test_the_notebook_copied_out_of_the_repository_says_what_to_do(spawn, tmp_path) -> None:
    """It failed with a bare StopIteration."""
    nb = json.loads((ROOT / "notebooks" / "walkthrough.ipynb").read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    src = "".join(first["source"]).split("run = ct.load(RUN)")[0]
    src = "\n".join(ln for ln in src.splitlines() if "IPython" not in ln)
    env = {k: v for k, v in os.environ.items() if k != "CHARLLM_RUN"}
    r = subprocess.run([sys.executable, "-c", src], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "FileNotFoundError" in r.stderr and "CHARLLM_RUN" in r.stderr and "StopIteration" not in r.stderr
    env["CHARLLM_RUN"] = str(tmp_path)
    ok = subprocess.run([sys.executable, "-c", src + "\nprint(RUN)"], cwd=tmp_path, env=env, capture_output=True,
                        text=True)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.strip() == str(tmp_path), ok.stderr
