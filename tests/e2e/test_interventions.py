"""Issue 22 item 2: the intervention switches of the examples change what they say, and the
what-if's predictions are compared with real recorded runs in which the change was made
(tests/fixtures/interventions, recorded by benchmarks/interventions.py)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys

import numpy as np
import pytest

from tests.conftest import FIXTURES, HAVE_TORCH, ROOT

PAIRS = FIXTURES.parent / "interventions"


def _module(name: str, path):  # noqa: ANN001, ANN202
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def harness():  # noqa: ANN201
    return _module("interventions_harness", ROOT / "benchmarks" / "interventions.py")


# ---------------------------------------------------------------------------- the switches
torch_only = pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")


def _switches(**kw):  # noqa: ANN003, ANN202
    mod = _module("example_interventions", ROOT / "examples" / "interventions.py")
    ap = argparse.ArgumentParser()
    mod.add_arguments(ap)
    argv = ["--switches"] + [x for k, v in kw.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    return mod, mod.Switches(ap.parse_args(argv), 0, 1)


def _profiled_mm_count(sw, step: int) -> tuple[int, int]:  # noqa: ANN001
    """aten::mm records the profiler sees for one forward+backward of a matrix product, and the
    matrix products the switch counted."""
    import torch

    a = torch.randn(16, 16, requires_grad=True)
    b = torch.randn(16, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, sw.installed():
        sw.start_step(step)
        (a @ b).sum().backward()
        sw.end_step(step, 0.0)
    names = [e.name for e in prof.events()]
    return names.count("aten::mm"), sw.log[-1]["matmuls"]


@torch_only
def test_mm_repeat_runs_each_matrix_product_n_times_only_on_changed_steps() -> None:
    _, sw = _switches(mm_repeat=3, change_on="odd")
    base, base_mm = _profiled_mm_count(sw, 0)
    changed, changed_mm = _profiled_mm_count(sw, 1)
    # forward a@b and backward grad_a = g @ b^T: 2 matrix products, each seen by the switch once
    assert base_mm == changed_mm == 2
    # base: each outer call and its one inner call; changed: the outer one and 3 inner ones
    assert base == 2 * 2 and changed == 2 * 4
    assert [s["changed"] for s in sw.log] == [False, True]


@torch_only
def test_cpu_delay_busy_waits_before_every_operator() -> None:
    import time

    import torch

    _, sw = _switches(cpu_delay_us=2000)
    x = torch.ones(4)
    with sw.installed():
        sw.start_step(0)
        t = time.perf_counter()
        for _ in range(5):
            x = x + 1
        took = time.perf_counter() - t
        sw.end_step(0, took)
    assert sw.log[0]["delays"] == 5
    assert took >= 5 * 2e-3  # a lower bound only: the waits happened


def test_parse_cores_and_share_between_ranks() -> None:
    mod = _module("example_interventions_c", ROOT / "examples" / "interventions.py")
    assert mod.parse_cores("0-3,6") == [0, 1, 2, 3, 6]
    assert mod._share([0, 1], 1, 2) == {1}
    assert mod._share([0], 1, 2) == {0}  # fewer cores than ranks: they share


def test_union_of_nested_and_overlapping_intervals(harness) -> None:  # noqa: ANN001
    s = np.array([0, 2, 5, 20, 21], dtype=np.int64)
    e = np.array([10, 4, 12, 25, 22], dtype=np.int64)
    assert harness._union_ns(s, e) == 12 + 5
    assert harness._union_ns(s[:0], e[:0]) == 0


# ------------------------------------------------------------- recorded pairs (real runs)
pairs_only = pytest.mark.skipif(not PAIRS.exists(), reason="no recorded intervention pairs")


@pytest.fixture(scope="module")
def results(harness, spawn):  # noqa: ANN001, ANN201 - the harness runs the CLI in child processes
    return harness.compare(PAIRS)


def _log(name: str) -> dict[int, dict]:
    return {s["step"]: s for s in json.loads((PAIRS / name / "switch_log.json").read_text())["steps"]}


def _pair(results: dict, name: str) -> dict:  # noqa: ANN001
    (p,) = results[name]["pairs"]  # step 5 (changed) against step 6 (base), both traced
    assert p["step"] == 5
    return p


def _err(p: dict, k: str) -> float:
    return abs(p[f"{k}_ns"] / p["measured_ns"] - 1)


@pairs_only
def test_recorded_runs_changed_what_they_say() -> None:
    for name in ("mm2", "ar2", "delay"):
        log = _log(name)
        assert [log[s]["changed"] for s in (5, 6)] == [True, False]
        assert log[5]["matmuls"] == log[6]["matmuls"] > 0  # same work apart from the change
    assert _log("delay")[5]["delays"] > 100 and _log("delay")[6]["delays"] == 0


@pairs_only
def test_collectives_doubled_in_the_changed_step() -> None:
    from charllm_trace.inputs.loader import load

    run = load(PAIRS / "ar2" / "run")
    for tr in run.traces.values():
        w = {s: (a, b) for s, a, b in tr.steps().select("step", "start_ns", "end_ns").iter_rows()}
        n = tr.nodes.filter(pl_col_coll(tr))
        per = [int(((n["start_ns"] >= w[s][0]) & (n["start_ns"] < w[s][1])).sum()) for s in (5, 6)]
        assert per[0] == 2 * per[1] > 0


def pl_col_coll(tr):  # noqa: ANN001, ANN201
    import polars as pl

    # every collective but DDP's broadcast of the model's buffers before each forward (not repeated)
    return (
        ~pl.col("on_gpu") & pl.col("name").str.starts_with("c10d::") & (pl.col("name") != "c10d::broadcast_")
    )


@pairs_only
def test_comm_x2_prediction_against_the_measured_pair(results) -> None:  # noqa: ANN001
    """comm=2 on gloo: the collectives' time is mostly waiting for the peer, and issuing each twice
    added little (+1.2 % on this pair); the what-if, which doubles that time, over-predicts, but
    by less than the naive estimate (19.1 % against 24.1 % when recorded)."""
    p = _pair(results, "ar2")
    assert p["predicted_ns"] > p["base_ns"]
    assert _err(p, "predicted") < _err(p, "naive")
    assert _err(p, "predicted") <= 0.25  # the error when recorded, 19.1 %, pinned: a regression shows


@pairs_only
def test_matmul_x2_measured_and_predicted(results) -> None:  # noqa: ANN001
    p = _pair(results, "mm2")
    assert p["measured_ns"] > 1.2 * p["base_ns"]  # +46 % when recorded
    assert p["naive_ns"] > p["base_ns"]
    if abs(p["predicted_ns"] / p["base_ns"] - 1) < 0.01:
        pytest.skip("gemm=2 does not reach CPU matrix products yet (the what-if keys of branch whatif)")
    assert _err(p, "predicted") < _err(p, "naive")


@pairs_only
def test_cpu_delay_measured_and_predicted(results) -> None:  # noqa: ANN001
    r, p = results["delay"], _pair(results, "delay")
    # the busy-waits alone add delays x 200 µs; the step grew by more (both ranks spin on 2 shared cores)
    assert p["measured_ns"] - p["base_ns"] > p["naive_ns"] - p["base_ns"] > 0
    if r["refused"]:
        pytest.skip(f"no per-operator CPU cost key yet (branch whatif): {r['refused']}")
    assert _err(p, "predicted") < _err(p, "naive")


def test_window_shift_matches_windows_to_iterations(harness) -> None:  # noqa: ANN001
    # iteration times 100 ms (base) / 170 ms (changed, odd); windows 4..9 of a CPU-like run hold
    # their own iteration, those of a GPU run that syncs after optimizer.step() the previous one
    log = {"steps": [{"step": i, "s": 0.17 if i % 2 else 0.10} for i in range(12)]}
    own = {w: (170e6 if w % 2 else 100e6) + 3e6 for w in range(4, 10)}
    prev = {w: (170e6 if (w - 1) % 2 else 100e6) - 2e6 for w in range(4, 10)}
    assert harness.window_shift(own, log) == 0
    assert harness.window_shift(prev, log) == 1
