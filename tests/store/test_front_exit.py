"""The program's exit (``cli/front.py``, ``program``): after a command it leaves without the
interpreter's teardown, yet prints the same bytes, gives the same exit codes, runs the ``atexit``
functions and waits for live threads (then it exits the usual way)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from charllm_trace.cli.app import main
from tests.conftest import FIXTURES

KINETO = FIXTURES / "cpu-2rank-gloo" / "rank-0.kineto.json.gz"

# a child that registers an atexit function and holds an object whose __del__ runs only at the
# interpreter's teardown, then runs the program with the given arguments; THREAD=1 also leaves a
# non-daemon thread running that writes its file late
_CHILD = (
    "import atexit, os, sys, threading, time\n"
    "from charllm_trace.cli.front import program\n"
    "mark = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(mark + '.atexit', 'w').write('ran'))\n"
    "class Teardown:\n"
    "    def __del__(self, write=os.write):  # os may be gone by then\n"
    "        write(2, b'TEARDOWN')\n"
    "held = Teardown()\n"
    "if os.environ.get('THREAD') == '1':\n"
    "    def late():\n"
    "        time.sleep(0.3)\n"
    "        open(mark + '.thread', 'w').write('done')\n"
    "    threading.Thread(target=late).start()\n"
    "sys.argv[0] = 'charllm-trace'\n"
    "program()\n"
)


def _child(spawn, tmp_path: Path, *args: str, thread: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "THREAD": "1" if thread else "0", "CHARLLM_TRACE_NO_CACHE": "1"}
    return spawn.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "mark"), *args], capture_output=True, env=env
    )


def test_analyze_prints_the_same_bytes_and_runs_atexit_without_teardown(spawn, tmp_path: Path) -> None:
    args = ["analyze", str(KINETO), "--format", "json"]
    inproc = CliRunner().invoke(main, [*args, "--no-cache"])
    assert inproc.exit_code == 0, inproc.stderr
    got = _child(spawn, tmp_path, *args)
    assert got.returncode == 0, got.stderr
    assert got.stdout == inproc.stdout_bytes  # flushed in full (a pipe here)
    assert (tmp_path / "mark.atexit").read_text() == "ran"
    assert b"TEARDOWN" not in got.stderr  # the teardown was skipped


def test_bad_input_keeps_exit_2_and_its_one_line(spawn, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    got = _child(spawn, tmp_path, "analyze", str(bad), "--format", "json")
    assert got.returncode == 2
    lines = [ln for ln in got.stderr.decode().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "bad.json" in lines[0], lines
    assert (tmp_path / "mark.atexit").read_text() == "ran"


def test_a_live_thread_gets_the_usual_exit(spawn, tmp_path: Path) -> None:
    """A thread still running at the end: the interpreter waits for it (and tears down as usual)."""
    got = _child(spawn, tmp_path, "--version", thread=True)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "mark.thread").read_text() == "done"
    assert (tmp_path / "mark.atexit").read_text() == "ran"
    assert b"TEARDOWN" in got.stderr
