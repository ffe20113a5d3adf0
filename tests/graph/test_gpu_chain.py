"""collect -> convert -> analyze on a real NVIDIA GPU with NCCL and NVML (issue 7).

Skipped, with the reason, where there is no CUDA GPU or no NVML. The same checks on the recorded
H200 fixture run on every machine in tests/e2e/test_fixture_h200.py.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as exc:  # pynvml missing or no driver
        return f"NVML unavailable: {exc}"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _needs_a_cuda_gpu() -> None:
    """Skips the module's tests without a CUDA GPU and NVML. Asked when the tests run, not when they
    are collected: importing torch costs every pytest worker seconds, also in the fast tier."""
    reason = _cuda_reason()
    if reason is not None:
        pytest.skip(reason)


def _cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    code = "import sys; from charllm_trace.cli.app import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.fixture(scope="module")
def gpu_run(spawn, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("gpu") / "run"
    p = _cli(
        "collect", "-o", str(run), "--steps", "2-3", "--telemetry-hz", "200", "--",
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
        str(ROOT / "examples" / "train_gpt_gpu.py"), "--steps", "5", "--layers", "2", "--d-model", "1024",
        "--vocab", "8192", "--batch", "8", "--seq", "1024",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return run


def test_collect_writes_nvml_telemetry_and_nccl_kernels(gpu_run: Path) -> None:
    meta = json.loads(next(gpu_run.glob("telemetry-*.meta.json")).read_text())
    assert meta["source"] == "nvml" and meta["complete"] is True
    assert meta["achieved_hz"] > 50
    info = json.loads((gpu_run / "rank-0.info.json").read_text())
    # torch writes the UUID without NVML's "GPU-" prefix; the telemetry reader matches both
    assert "GPU-" + info["device"]["uuid"].removeprefix("GPU-") in {d["uuid"] for d in meta["devices"]}
    with gzip.open(gpu_run / "rank-0.kineto.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = {e.get("name", "") for e in events if e.get("cat") == "kernel"}
    # NCCL's own kernels: ncclDevKernel_* with several ranks, oneRankReduce (all_reduce AVG) with one
    assert any("nccl" in n.lower() or "onerankreduce" in n.lower() for n in kernels), sorted(kernels)[:20]
    ranges = {e.get("name", "") for e in events if e.get("cat") == "user_annotation"}
    assert {"nccl:all_reduce", "nccl:_all_gather_base"} <= ranges


def test_convert_and_analyze_energy_matches_the_counter(gpu_run: Path, tmp_path: Path) -> None:
    p = _cli("convert", str(gpu_run), "-o", str(tmp_path / "et"))
    assert p.returncode == 0, p.stderr
    p = _cli("analyze", str(tmp_path / "et"), "--format", "json", "-o", str(tmp_path / "a.json"))
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "a.json").read_text())
    frames = doc["frames"]
    types = {r["coll_type"] for r in frames["collectives"]}
    assert {"all_reduce", "all_gather"} <= types
    assert all(r["bytes"] and r["bytes"] > 0 for r in frames["collectives"])
    (tot,) = frames["energy_totals"]
    # operators + idle over the window = the NVML energy counter's delta, within 2 %
    assert tot["counter_j"] > 0
    assert abs(tot["operators_j"] + tot["idle_j"] - tot["counter_j"]) <= 0.02 * tot["counter_j"]
    assert abs(tot["integral_j"] - tot["counter_j"]) <= 0.10 * tot["counter_j"]
    assert any(r["avg_w"] and r["avg_w"] > 0 for r in frames["power"])
