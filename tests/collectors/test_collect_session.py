"""The Python API (Session) in a single CPU process, and the launcher's rank/step selection."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HAVE_TORCH, ROOT

pytestmark = [pytest.mark.torch, pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")]

LOOP = r"""
import sys, torch
from charllm_trace.collectors.session import Session
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with Session(sys.argv[1], steps=sys.argv[2], telemetry_hz=float(sys.argv[3]), telemetry_source=sys.argv[4]) as s:
    for i in range(5):
        with torch.profiler.record_function(f"my_step_{i}"):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
        s.step()
"""


def _run_loop(run: Path, steps: str, hz: float = 0, source: str = "auto") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LOOP, str(run), steps, str(hz), source],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _names(run: Path, rank: int = 0) -> list[str]:
    with gzip.open(run / f"rank-{rank}.kineto.json.gz") as f:
        return [e["name"] for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def test_session_traces_step_zero_and_exact_window(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    p = _run_loop(run, "0-1")
    assert p.returncode == 0, p.stderr
    names = _names(run)
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == ["ProfilerStep#0", "ProfilerStep#1"]
    assert sorted(n for n in names if n.startswith("my_step_")) == ["my_step_0", "my_step_1"]
    with gzip.open(run / "rank-0.host_et.json.gz") as f:
        et_names = [n["name"] for n in json.load(f)["nodes"]]
    assert sorted(n for n in et_names if n.startswith("my_step_")) == ["my_step_0", "my_step_1"]
    m = json.loads((run / "manifest.json").read_text())
    assert m["steps"]["traced"] == {"0": [0, 1]} and m["status"] == "finished"
    # The same run directory again: refused, the files are kept.
    p = _run_loop(run, "0-1")
    assert p.returncode != 0 and "already exists" in p.stderr


def test_session_starts_and_stops_a_sampler(spawn, tmp_path: Path) -> None:
    stream = tmp_path / "s.csv"  # a SYNTHETIC stream: one device, a value change every 20 ms
    stream.write_text("t_ns,device,power_w\n" + "".join(f"{k * 20_000_000},0,{k}\n" for k in range(1000)))
    run = tmp_path / "run"
    p = _run_loop(run, "2-3", hz=100, source=f"replay:{stream}")
    assert p.returncode == 0, p.stderr
    names = _names(run)
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == ["ProfilerStep#2", "ProfilerStep#3"]
    (meta,) = [json.loads(q.read_text()) for q in run.glob("telemetry-*.meta.json")]
    assert meta["source"] == "replay" and meta["complete"] is True and meta["rows"] > 0


@pytest.mark.slow
def test_launcher_rank_filter_and_run_ending_inside_window(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "charllm_trace.cli.app",
        "collect",
        "--steps",
        "4-8",
        "--ranks",
        "1",
        "--telemetry-hz",
        "0",
        "-o",
        str(run),
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(ROOT / "examples" / "train_tiny.py"),
        "--steps",
        "6",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert not list(run.glob("rank-0.*"))
    names = _names(run, 1)
    # 6 optimizer steps = steps 0..5; the window 4-8 is cut short by the end of training: step 6
    # began (the shutdown after the last optimizer step) but never ended, and is marked partial.
    steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    info = json.loads((run / "rank-1.info.json").read_text())
    assert info["steps_traced"] == [4, 5] and info["partial_step"] == 6 and info["trace_complete"] is False
    m = json.loads((run / "manifest.json").read_text())
    assert m["ranks_traced"] == [1] and m["ranks_requested"] == [1]


def test_session_killed_inside_leaves_a_manifest_readers_call_interrupted(spawn, tmp_path: Path) -> None:
    from charllm_trace.collectors.outcome import interruption

    run = tmp_path / "run"
    loop = LOOP.replace(
        "        s.step()",
        "        s.step()\n        if i == 3: import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    )
    p = subprocess.run(
        [sys.executable, "-c", loop, str(run), "1-2", "0", "auto"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -9
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "running" and m["run_id"] and m["launcher"]["pid"]
    note = interruption(run, m)
    assert note is not None and note.startswith("this run was interrupted at ")
    assert "its launcher died without finishing the manifest" in note
