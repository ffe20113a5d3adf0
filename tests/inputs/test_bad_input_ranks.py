"""``analyze --ranks`` with absurd ranges is one line and exit 2, in bounded memory (issue 15:
``--ranks 0-2000000000`` grew to > 6 GB in 4 s)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a regression fails, not the machine


@pytest.mark.parametrize(
    ("ranks", "words"),
    [
        ("0-2000000000", "beyond the largest rank"),
        ("5-2", "runs backwards"),
        ("0-1000000," * 3 + "0", "more than"),
        ("x", "expected a list"),
    ],
)
def test_absurd_ranks_are_one_line(spawn, tmp_path: Path, ranks: str, words: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "charllm_trace.cli.app", "analyze", "--no-cache", "--ranks", ranks, str(FIXTURE)],
        capture_output=True, text=True, timeout=120, preexec_fn=_cap, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: --ranks") and words in line, line


def test_collect_ranks_are_bounded_before_anything_is_built() -> None:
    from charllm_trace.collectors.launcher import parse_ranks
    from charllm_trace.core.errors import UsageError
    from charllm_trace.core.limits import MAX_RANK

    assert parse_ranks("0,8,16-18") == [0, 8, 16, 17, 18]
    assert parse_ranks(f"{MAX_RANK - 2}-{MAX_RANK - 1}") == [MAX_RANK - 2, MAX_RANK - 1]
    with pytest.raises(UsageError, match="beyond the largest rank"):
        parse_ranks("0-2000000000")


def test_collect_ranks_on_the_command_line(spawn, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "charllm_trace.cli.app", "collect", "--ranks", "0-2000000000", "-o", str(tmp_path / "run"),
         "--", sys.executable, "-c", "pass"],
        capture_output=True, text=True, timeout=120, preexec_fn=_cap, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "beyond the largest rank" in line, line
    assert not (tmp_path / "run").exists()  # refused before the run directory was made
