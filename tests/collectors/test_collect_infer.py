"""`charllm-trace collect --step-marker` around the inference example (issue 24): iterations of a
loop that never calls optimizer.step(), counted by a record_function marker."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HAVE_TORCH, ROOT

pytestmark = [pytest.mark.torch, pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")]

EXAMPLE = ROOT / "examples" / "infer_tiny.py"
BATCH = 2
NEW_TOKENS = 4
# 4 batches of 2 requests; the example's smallest model, a few seconds on one core
ARGS = [
    "--requests",
    "8",
    "--batch",
    str(BATCH),
    "--new-tokens",
    str(NEW_TOKENS),
    "--dim",
    "32",
    "--layers",
    "1",
]


def _collect(out: Path, marker: str, steps: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "charllm_trace.cli.app", "collect", "--step-marker", marker, "--steps", steps,
           "--telemetry-hz", "0", "-o", str(out), "--", sys.executable, str(EXAMPLE), *ARGS, *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def run_dir(spawn, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("infer") / "run"
    p = _collect(out, "batch", "1-2", "--out", str(out.parent / "clock.json"))
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def _ranges(run_dir: Path) -> list[tuple[float, float, str]]:
    with gzip.open(run_dir / "rank-0.kineto.json.gz") as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    return sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev if e.get("cat") == "user_annotation")


def test_iterations_traced_by_marker(run_dir: Path) -> None:
    info = json.loads((run_dir / "rank-0.info.json").read_text())
    assert info["state"] == "done" and info["steps_traced"] == [1, 2] and info["step_marker"] == "batch"
    assert info["steps_completed"] == 4  # the four batches, none an optimizer step
    r = _ranges(run_dir)
    steps = [x for x in r if x[2].startswith("ProfilerStep#")]
    batches = [x for x in r if x[2] == "batch"]
    assert [s[2] for s in steps] == ["ProfilerStep#1", "ProfilerStep#2"] and len(batches) == 2
    for s, b in zip(steps, batches, strict=True):  # each iteration's step opens where its range opens
        assert s[0] <= b[0] and b[1] <= s[1] + 1
    # batches 1 and 2 serve requests 2..5; each request's tokens are its own
    names = [x[2] for x in r]
    assert sorted(n for n in names if n.startswith("request#")) == [f"request#{i}" for i in range(2, 6)]
    assert all(names.count(f"token#{i}") == NEW_TOKENS for i in range(2, 6))
    assert names.count("prefill") == 2 and names.count("decode") == 2 * (NEW_TOKENS - 1)


def test_iteration_zero_and_a_marker_that_never_occurs(spawn, tmp_path: Path) -> None:
    p = _collect(tmp_path / "zero", "batch", "0")  # a marker's iteration 0 begins after the hook
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((tmp_path / "zero" / "rank-0.info.json").read_text())["steps_traced"] == [0]
    p = _collect(tmp_path / "none", "no-such-range", "1-2")
    assert p.returncode == 0, p.stderr[-3000:]  # the command's own exit code
    assert (
        "no rank traced any step: no process of the command ever opened a 'no-such-range' range" in p.stderr
    )
    assert not (tmp_path / "none" / "rank-0.kineto.json.gz").exists()


def test_example_kv_cache_matches_full_recompute() -> None:
    """The example's batched, left-padded, KV-cached generation gives each request the tokens a
    full forward over its own unpadded sequence gives, step by step (no cache reuse)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("infer_tiny", EXAMPLE)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    torch.manual_seed(0)
    model = m.TinyDecoder(64, 4, 2, 200).eval()
    prompts = m.make_prompts(3, 6, 1)
    assert len({len(m.tokenize(p)) for p in prompts}) > 1  # the batch is padded
    cpu = torch.device("cpu")
    out = m.serve_batch(model, prompts, 0, 6, cpu)
    for j, p in enumerate(prompts):
        ids, gen = m.tokenize(p), []
        for _ in range(6):
            with torch.inference_mode():
                x = torch.tensor([ids + gen])
                gen.append(
                    int(model(x, model.new_cache(1, cpu), 0, torch.zeros(1, dtype=torch.long)).argmax(-1))
                )
        assert m.detokenize(gen) == out[j]


def test_analysed_per_iteration_with_phases_and_request_latency(run_dir: Path) -> None:
    """The collected run analysed by its marker: two iterations with their phases, and each
    request's time to first token and per output token as the script measured them itself
    (time.time_ns next to the markers)."""
    import polars as pl

    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.converters.run_dir import convert_path

    res = analyze_run(
        convert_path(run_dir), AnalyzeOptions(per_step=True, critical_path=False, step_marker="batch")
    )
    it = res.iterations
    assert it is not None and it.iterations["step"].to_list() == [1, 2]
    ph = {
        (s, p): n
        for s, p, n in it.phases.filter(pl.col("step").is_not_null()).select("step", "phase", "n").rows()
    }
    assert ph == {(s, p): n for s in (1, 2) for p, n in
                  (("prefill", 1), ("decode", NEW_TOKENS - 1), ("tokenize", 1), ("detokenize", 1))}  # fmt: skip
    clock = json.loads((run_dir.parent / "clock.json").read_text())
    req = it.requests.sort("request")
    assert req["request"].to_list() == ["2", "3", "4", "5"] and set(req["n_tokens"]) == {NEW_TOKENS}
    for r in req.iter_rows(named=True):
        arrival, tokens = clock["arrival"][r["request"]], clock["tokens"][r["request"]]
        ttft, tpot = tokens[0] - arrival, (tokens[-1] - tokens[0]) / (len(tokens) - 1)
        # the script's clock reads are a few µs outside the ranges; 0.5 ms of slack for a loaded machine
        assert abs(r["ttft_ns"] - ttft) < 500_000, (r, ttft)
        assert abs(r["tpot_ns"] - tpot) < 500_000, (r, tpot)


def test_a_time_window(spawn, tmp_path: Path) -> None:
    """--window 0.2+0.3: 0.3 s traced from 0.2 s after the start (once torch is imported), with
    no marker and no optimizer: ProfilerStep#0 spans the window. The program: 3 s of matmuls."""
    # 3 s of matmuls, and on a loaded machine on until the window has closed (its handler is gone)
    prog = (
        "import signal, time, torch\nt = time.time(); x = torch.ones(64, 64)\n"
        "while time.time() - t < 3 or (time.time() - t < 60 and signal.getsignal(signal.SIGALRM) != signal.SIG_DFL):\n"
        "    x = x @ x * 1e-3"
    )
    cmd = [sys.executable, "-m", "charllm_trace.cli.app", "collect", "--window", "0.2+0.3", "--telemetry-hz", "0",
           "--cpu-hz", "0", "-o", str(tmp_path / "w"), "--", sys.executable, "-c", prog]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    info = json.loads((tmp_path / "w" / "rank-0.info.json").read_text())
    assert (info["mode"], info["state"], info["steps_traced"]) == ("window", "done", [0])
    steps = [x for x in _ranges(tmp_path / "w") if x[2].startswith("ProfilerStep#")]
    assert [s[2] for s in steps] == ["ProfilerStep#0"]
    assert steps[0][1] - steps[0][0] >= 0.3e6  # µs: at least the window asked for (its end waits for a bytecode boundary)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--window", "2"], "--window '2': expected DELAY+DURATION"),
        (["--window", "1+0"], "DURATION > 0"),
        (["--window", "1+1", "--step-marker", "batch"], "choose one"),
        (["--step-marker", " "], "--step-marker: an empty name"),
    ],
)
def test_bad_iteration_options(tmp_path: Path, args: list[str], says: str) -> None:
    from tests.conftest import invoke

    r = invoke("collect", "-o", str(tmp_path / "r"), *args, "--", sys.executable, "-c", "pass")
    assert r.exit_code == 2 and says in r.output and r.output.strip().count("\n") == 0, r.output
    assert not (tmp_path / "r").exists()
