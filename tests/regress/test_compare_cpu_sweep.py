"""``compare`` over a CPU-allocation sweep (issue 24 item 5): cores per rank, iteration latency,
GPU idle and CPU wait per step, from runs collected with ``collect --cpus``."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.analysis.cpu_wait import CPU_WAIT_SCHEMA
from charllm_trace.regress.cpu_sweep import cpu_figures
from tests.conftest import HAVE_TORCH, ROOT

EXAMPLE = ROOT / "examples" / "infer_tiny.py"
ARGS = ["--requests", "8", "--batch", "2", "--new-tokens", "4", "--dim", "32", "--layers", "1"]
# a process that keeps one core busy: started inside the collected command, it inherits its core
SPIN = "import time\nt = time.time() + 60\nwhile time.time() < t: pass\n"


def test_cpu_figures_mean_over_ranks_then_steps() -> None:
    rows = pl.DataFrame(
        {"rank": [0, 1, 0, 1], "step": [1, 1, 2, 2], "window_ns": [10e6, 12e6, 20e6, 18e6],
         "wait_ns": [1e6, 3e6, 4e6, 8e6], "gpu_idle_ns": [None] * 4},  # fmt: skip
    ).select([(pl.col(c) if c in ("rank", "step", "window_ns", "wait_ns", "gpu_idle_ns") else pl.lit(None))
              .cast(t).alias(c) for c, t in CPU_WAIT_SCHEMA.items()])  # fmt: skip
    f = cpu_figures(rows, by_marker=True)
    assert f["cpu_wait_ms"] == pytest.approx(((1 + 3) / 2 + (4 + 8) / 2) / 2)
    assert f["iter_ms"] == pytest.approx((12 + 20) / 2)  # the slowest rank per iteration
    assert f["gpu_idle_ms"] is None  # no GPU work: unknown, not zero
    assert cpu_figures(rows, by_marker=False)["iter_ms"] is None


def _collect(out: Path, cpus: str, *wrap: str) -> None:
    cmd = [sys.executable, "-m", "charllm_trace.cli.app", "collect", "--cpus", cpus, "--step-marker", "batch",
           "--steps", "1-2", "--telemetry-hz", "0", "--cpu-hz", "100", "-o", str(out), "--", *wrap,
           sys.executable, str(EXAMPLE), *ARGS]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]


def _batch_ms(run: Path) -> float:
    """Mean length of the traced iterations' ``batch`` ranges in the Kineto profile (ms)."""
    with gzip.open(run / "rank-0.kineto.json.gz") as f:
        ev = json.load(f)["traceEvents"]
    durs = [e["dur"] for e in ev if e.get("cat") == "user_annotation" and e.get("name") == "batch"]
    assert durs
    return sum(durs) / len(durs) / 1e3


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")
def test_compare_sweep_columns_and_a_starved_core(spawn, tmp_path: Path) -> None:
    spin = tmp_path / "spin.py"
    spin.write_text(SPIN)
    alone, starved = tmp_path / "alone", tmp_path / "starved"
    _collect(alone, "1")
    # the same command sharing its one core with a busy process: its launching thread must wait
    _collect(starved, "1", "sh", "-c", f'{sys.executable} {spin} & s=$!; "$@"; rc=$?; kill $s; exit $rc', "sh")
    cmd = [sys.executable, "-m", "charllm_trace.cli.app", "compare", str(alone), str(starved), "--format", "json",
           "--no-cache"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {Path(r["run"]).name: r for r in json.loads(p.stdout)["rows"]}
    for name, run in (("alone", alone), ("starved", starved)):
        r = rows[name]
        assert r["cpus_per_rank"] == 1
        assert r["iter_ms"] == pytest.approx(_batch_ms(run), rel=0.05)
        assert 0 <= r["cpu_wait_ms"] <= r["iter_ms"]
        assert r["gpu_idle_ms"] is None  # a CPU-only run
    # sharing one core with a spinning process, the thread waits for about half its time
    assert rows["starved"]["cpu_wait_ms"] > 0.25 * rows["starved"]["iter_ms"]
    assert rows["starved"]["cpu_wait_ms"] > rows["alone"]["cpu_wait_ms"]
