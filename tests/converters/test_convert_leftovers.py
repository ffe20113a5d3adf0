"""A ``convert`` killed while writing leaves ``.rank-N.et.tmp-PID``; the next ``convert`` into the
directory removes it (issue 28), and only it: the temporary must be of a process no longer
running and hold the header convert writes; a file of the user's named like one stays."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from charllm_trace.cli.app import main
from tests.conftest import FIXTURES

RUN = FIXTURES / "cpu-2rank-gloo"


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _convert(out: Path, *extra: str) -> None:
    r = CliRunner().invoke(main, ["convert", str(RUN), "-o", str(out), *extra])
    assert r.exit_code == 0, r.output


def test_a_killed_converts_temporary_goes_and_nothing_else(spawn, tmp_path: Path) -> None:
    out = tmp_path / "ets"
    _convert(out)
    pid = _dead_pid()
    left = out / f".rank-0.et.tmp-{pid}"
    left.write_bytes((out / "rank-0.et").read_bytes()[:3000])  # cut short, as a kill leaves it
    mine = out / f".rank-1.et.tmp-{pid}"
    mine.write_text("my notes")
    running = out / f".rank-1.et.tmp-{os.getppid()}"  # a live process: not stale
    running.write_bytes((out / "rank-1.et").read_bytes()[:3000])
    _convert(out, "--force")
    assert not left.exists()
    assert mine.read_text() == "my notes" and running.exists()
