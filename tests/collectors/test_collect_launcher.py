"""The launcher without torch: option parsing, run-directory safety, exit codes, the manifest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from charllm_trace.collectors.launcher import parse_parallel, parse_ranks, parse_steps
from charllm_trace.core.errors import UsageError


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "charllm_trace.cli.app", *args], capture_output=True, text=True, timeout=timeout
    )


def test_parse_steps() -> None:
    assert parse_steps("10-12") == (10, 12)
    assert parse_steps(" 7 ") == (7, 7)
    assert parse_steps("0-1", allow_zero=True) == (0, 1)
    for bad in ("", "a", "3-1", "1-2-3", "-1"):
        with pytest.raises(UsageError):
            parse_steps(bad)
    with pytest.raises(UsageError, match="step 0"):
        parse_steps("0-2")


def test_parse_ranks_and_parallel() -> None:
    assert parse_ranks("all") is None
    assert parse_ranks("0,8,16-18,8") == [0, 8, 16, 17, 18]
    with pytest.raises(UsageError):
        parse_ranks("0,x")
    assert parse_parallel("tp=8,pp=4,dp=2,ep=1") == {"tp": 8, "pp": 4, "dp": 2, "ep": 1}
    assert parse_parallel(None) is None
    for bad in ("tp=0", "zz=2", "tp8"):
        with pytest.raises(UsageError):
            parse_parallel(bad)
    from charllm_trace.collectors.launcher import parse_workload

    assert parse_workload("model=gpt-2,mbs=2,global_batch=64,seq_len=1024,tokens_per_step=65536") == {
        "model": "gpt-2",
        "micro_batch": 2,
        "global_batch": 64,
        "seq_len": 1024,
        "tokens_per_step": 65536,
    }
    assert parse_workload(None) is None
    for bad in ("gbs=0", "lr=0.1", "mbs=two", "model="):
        with pytest.raises(UsageError):
            parse_workload(bad)


def test_exit_code_propagates_and_manifest_written(spawn, tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = cli(
        "collect",
        "-o",
        str(out),
        "--parallel",
        "tp=2,dp=1",
        "--workload",
        "model=tiny,gbs=4,seq=8",
        "--",
        sys.executable,
        "-c",
        "import sys; sys.exit(3)",
    )
    assert p.returncode == 3, p.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and m["exit_code"] == 3
    assert m["parallel"]["tp"] == 2 and m["parallel"]["product_tp_pp_dp_cp"] == 2
    assert m["workload"] == {"model": "tiny", "global_batch": 4, "seq_len": 8}
    assert m["command"][:2] == [sys.executable, "-c"]
    assert m["ranks_traced"] == []  # no optimizer ever stepped
    assert m["failure"] == "the command exited with code 3" and m["run_id"]
    assert "run failed: the command exited with code 3" in p.stderr
    assert (
        "no rank traced any step: the command failed before any rank recorded an optimizer step" in p.stderr
    )
    assert (out / "node-{}.json".format(m["hostnames"][0])).exists() or list(out.glob("node-*.json"))


def test_killed_command_exit_code(spawn, tmp_path: Path) -> None:
    p = cli(
        "collect",
        "-o",
        str(tmp_path / "r"),
        "--telemetry-hz",
        "0",
        "--",
        sys.executable,
        "-c",
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    )
    assert p.returncode == 128 + 9


def test_existing_dir_refused_then_forced(spawn, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "rank-0.kineto.json.gz").write_bytes(b"old")
    (out / "notes.txt").write_text("user file")
    p = cli("collect", "-o", str(out), "--", sys.executable, "-c", "pass")
    assert p.returncode == 2
    assert (
        p.stderr.strip().splitlines()[-1]
        == f"error: {out}: run directory exists and is not empty (use --force to replace its trace files)"
    )
    assert (out / "rank-0.kineto.json.gz").read_bytes() == b"old"
    p = cli("collect", "-o", str(out), "--force", "--telemetry-hz", "0", "--", sys.executable, "-c", "pass")
    assert p.returncode == 0, p.stderr
    assert not (out / "rank-0.kineto.json.gz").exists()  # our stale file is gone
    assert (out / "notes.txt").read_text() == "user file"  # the user's is kept


def test_missing_command_and_bad_options(spawn, tmp_path: Path) -> None:
    p = cli("collect", "-o", str(tmp_path / "a"), "--", "no-such-program-xyz")
    assert p.returncode == 2 and "cannot run the training command" in p.stderr
    p = cli("collect", "--steps", "5-2", "-o", str(tmp_path / "b"), "--", "true")
    assert p.returncode == 2 and p.stderr.startswith("error: --steps")
    assert not (tmp_path / "b").exists()


def test_collectors_import_no_torch_nvml_amdsmi(spawn) -> None:
    code = (
        "import sys, charllm_trace.collectors.launcher, charllm_trace.collectors.session, "
        "charllm_trace.collectors.telemetry, charllm_trace.collectors.manifest\n"
        "print(sorted(m for m in ('torch', 'pynvml', 'amdsmi') if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr


def test_a_killed_run_says_what_its_ranks_traced(spawn, tmp_path: Path) -> None:  # noqa: ANN001 - collect starts the command
    """Issue 28: after a kill, the launcher said "no rank traced any step" while rank-0.info.json
    listed steps_traced 3..400 (the profile was never saved); it now says what was traced."""
    out = tmp_path / "run"
    info = {"rank": 0, "world_size": 1, "steps_traced": list(range(3, 401)), "steps_completed": 400}
    code = (
        "import json, os, pathlib, signal; "
        f"pathlib.Path({str(out / 'rank-0.info.json')!r}).write_text(json.dumps({info!r})); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    p = cli("collect", "-o", str(out), "--", sys.executable, "-c", code)
    assert p.returncode == 137, p.stderr
    assert "no rank traced any step" not in p.stderr
    assert "no rank's trace was saved: rank 0 traced steps 3-400 (rank-*.info.json)" in p.stderr, p.stderr
