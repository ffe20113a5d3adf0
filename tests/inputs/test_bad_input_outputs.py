"""Output paths are checked before any work (issue 15 item 5: ``report``/``export -o
missing_dir/x`` was a FileNotFoundError, exit 3, after the whole analysis ran)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "charllm_trace.cli.app", *args],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [
        ["report", str(FIXTURE), "-o"],
        ["export", "perfetto", str(FIXTURE), "-o"],
        ["analyze", str(FIXTURE), "--save"],
        ["baseline", str(FIXTURE), "-o"],
        ["analyze", str(FIXTURE), "--format", "json", "-o"],
    ],
    ids=["report", "export-perfetto", "analyze-save", "baseline", "analyze-json"],
)
@pytest.mark.parametrize("where", ["missing-dir", "under-a-file", "a-directory"])
def test_bad_output_places_are_one_line_before_the_analysis(
    spawn, tmp_path: Path, command: list[str], where: str
) -> None:
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "adir").mkdir()
    target = {"missing-dir": "missing/x.out", "under-a-file": "afile/x.out", "a-directory": "adir"}[where]
    r = _cli(tmp_path, "--debug", *command, target, "--no-cache", "--force")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    # --debug shows the traceback of an InputError; its last line is the one-line message
    assert lines[-1].startswith(f"error: {target}: "), lines[-1]
    # refused before any reading: the traceback starts in the output check, not in a loader
    assert "loader.py" not in r.stderr and "analyze_path" not in r.stderr, r.stderr
    assert (tmp_path / "afile").read_text() == "mine" and (tmp_path / "adir").is_dir()
