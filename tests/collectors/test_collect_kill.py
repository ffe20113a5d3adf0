"""A collected run that is interrupted or killed mid-way leaves readable files."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from charllm_trace.collectors.runstate import proc_alive
from charllm_trace.collectors.telemetry import read_telemetry
from tests.conftest import HAVE_TORCH, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")]


def _start(run: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "charllm_trace.cli.app",
        "collect",
        "--steps",
        "2-3",
        "-o",
        str(run),
        *extra,
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(ROOT / "examples" / "train_tiny.py"),
        "--steps",
        "100000",
    ]
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _wait_for_traces(run: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        # (rank-<N>.info.json exists from the rank's start; the trace files once the window ends)
        if all((run / f"rank-{r}.kineto.json.gz").exists() for r in range(2)):
            return
        if proc.poll() is not None:
            pytest.fail(f"collect ended early: {proc.stderr.read()[-2000:]}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("no traces after 120 s")


def _kill_ranks(run: Path) -> None:
    for info in run.glob("rank-*.info.json"):
        try:
            os.kill(json.loads(info.read_text())["pid"], signal.SIGKILL)
        except (ProcessLookupError, ValueError, KeyError):
            pass


def _readable(run: Path) -> None:
    for r in range(2):
        with gzip.open(run / f"rank-{r}.kineto.json.gz") as f:
            names = [e["name"] for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [
            "ProfilerStep#2",
            "ProfilerStep#3",
        ]
        with gzip.open(run / f"rank-{r}.host_et.json.gz") as f:
            assert json.load(f)["nodes"]
    read_telemetry(run)  # parses (empty without a GPU)


def test_interrupt_is_forwarded_and_files_stay_readable(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _start(run)
    _wait_for_traces(run, proc)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C does to the launcher
    try:
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_ranks(run)
    assert rc != 0
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["exit_code"] == rc
    assert m["interrupted_by"] == "SIGINT to the launcher"
    assert m["steps"]["traced"] == {"0": [2, 3], "1": [2, 3]}
    _readable(run)


def test_sigkill_of_everything_leaves_readable_files(spawn, tmp_path: Path) -> None:
    # Telemetry from a SYNTHETIC replay stream (no GPU here): one device, a new value every 20 ms.
    stream = tmp_path / "stream.csv"
    stream.write_text("t_ns,device,power_w\n" + "".join(f"{k * 20_000_000},0,{k}\n" for k in range(30_000)))
    run = tmp_path / "run"
    proc = _start(run, "--telemetry-source", f"replay:{stream}")
    _wait_for_traces(run, proc)
    time.sleep(1.0)
    t_kill = time.time_ns()
    infos = [json.loads((run / f"rank-{r}.info.json").read_text()) for r in range(2)]
    # The launcher and torchrun; torchrun starts each rank in a session of its own, but the ranks
    # die with torchrun (PR_SET_PDEATHSIG) and the launcher's warden stops what is left.
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    try:
        deadline = time.time() + 30
        while (
            time.time() < deadline and json.loads((run / "manifest.json").read_text())["status"] == "running"
        ):
            time.sleep(0.2)
        m = json.loads((run / "manifest.json").read_text())
        assert m["status"] == "interrupted" and "the launcher (pid" in m["interrupted_by"]
        for i in infos:
            assert not proc_alive(i["pid"], i["pid_start"]), f"rank {i['rank']} still running"
    finally:
        _kill_ranks(run)
    _readable(run)
    # The sampler notices that its launcher is gone and finishes its file.
    metas = list(run.glob("telemetry-*.meta.json"))
    assert len(metas) == 1
    deadline = time.time() + 10
    while time.time() < deadline and not json.loads(metas[0].read_text())["complete"]:
        time.sleep(0.2)
    meta = json.loads(metas[0].read_text())
    assert meta["complete"] is True and meta["source"] == "replay"
    tel = read_telemetry(run)
    assert tel.height > 50
    # Sampling went on until the launcher's death was noticed (checked once a second), not longer.
    assert t_kill - 1_000_000_000 < tel["time_ns"].max() < t_kill + 2_500_000_000
