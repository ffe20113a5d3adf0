"""ruff over the package with the project's rules, the size rules on functions included (C901,
PLR0912, PLR0915 in pyproject.toml; issue 23 item 4): a function that grows past them fails here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> list[str]:
    beside = Path(sys.executable).with_name("ruff")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed")
    return [found]


def test_package_passes_ruff_with_the_size_rules(spawn) -> None:
    done = subprocess.run(
        [*_ruff(), "check", "--no-cache", "--output-format", "concise", "charllm_trace"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"ruff found problems:\n{done.stdout}{done.stderr}"


def test_the_size_rules_are_on(spawn) -> None:
    """The rules are selected in pyproject.toml, so the check above is not vacuous: a function
    with 16 branches written to a scratch file is reported."""
    body = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(16))
    src = f"def f(x):\n{body}\n    return -1\n"
    done = subprocess.run(
        [
            *_ruff(),
            "check",
            "--no-cache",
            "--output-format",
            "concise",
            "--stdin-filename",
            "charllm_trace/x.py",
            "-",
        ],
        cwd=ROOT,
        input=src,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "C901" in done.stdout and "PLR0912" in done.stdout, done.stdout + done.stderr
