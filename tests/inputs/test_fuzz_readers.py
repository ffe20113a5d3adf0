"""The fuzz job (issue 15): every reader of untrusted input, fed derandomized mutants of small real
inputs in a subprocess whose address space is capped, ends in a result or a one-line input error:
no other exception, no crash (a signal), no memory blow-up. See tests/bad_inputs/fuzz.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READERS = ["kineto-real-bytes", "kineto-real-values", "et-real-bytes", "kineto-bytes", "kineto-values", "et-bytes", "host-et-values", "manifest-values", "baseline-values",
           "baseline-bytes", "telemetry-meta-values", "telemetry-csv-bytes", "telemetry-import-nvidia-smi-bytes",
           "telemetry-import-dcgm-bytes", "telemetry-import-amd-smi-bytes", "telemetry-import-rocm-smi-bytes",
           "telemetry-import-zeus-bytes", "results-manifest-values", "results-frame-bytes"]  # fmt: skip


@pytest.mark.parametrize("reader", READERS)
def test_reader_survives_mutants(spawn, reader: str, tmp_path: Path) -> None:
    if "-real-" in reader:
        from tests.conftest import SHARED_TRACES

        if not SHARED_TRACES.is_dir():
            pytest.skip("../shared (real traces to mutate) is absent")
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run(
        [sys.executable, "-m", "tests.bad_inputs.fuzz", reader],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-4000:])
    assert "examples, ok" in r.stdout
