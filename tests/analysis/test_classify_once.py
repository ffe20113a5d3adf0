"""The analysis layer classifies each rank once (issue 12 item 5): ``analyze_run`` classifies,
and overlap, bandwidth, energy, the execution graph and the report's lanes take that frame."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import charllm_trace.core.classify as cl
from charllm_trace.analysis import AnalyzeOptions, RunAnalysis, analyze_run
from charllm_trace.core.model import Run, Trace
from charllm_trace.inputs import loader
from charllm_trace.render.report import report_data
from tests.conftest import SHARED_TRACES

GLOO = Path(__file__).parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"
A100 = SHARED_TRACES / "hta" / "a100_ddp_nccl_rank0.json.gz"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of ``classify`` through the module attribute every caller uses."""
    seen: list[int] = []
    real = cl.classify

    def counting(nodes: pl.DataFrame) -> pl.DataFrame:
        seen.append(nodes.height)
        return real(nodes)

    # every module that imported the name holds its own reference: patch them all
    for mod in list(sys.modules.values()):
        if (
            getattr(mod, "__name__", "").startswith("charllm_trace")
            and getattr(mod, "classify", None) is real
        ):
            monkeypatch.setattr(mod, "classify", counting)
    return seen


def _check(run: Run, calls: list[int], options: AnalyzeOptions) -> RunAnalysis:
    an = analyze_run(run, options)
    data = report_data(run, an)
    assert len(calls) == len(run.ranks), f"classify called {len(calls)} times for {len(run.ranks)} ranks"
    assert sorted(calls) == sorted(t.nodes.height for t in run.traces.values())
    assert set(an.classified) == set(run.ranks)
    assert data.lanes, "the report draws the lanes from the analysis' classification"
    return an


def test_gloo_classified_once_per_rank(calls: list[int]) -> None:
    run = loader.load(GLOO)
    assert len(run.ranks) == 2
    _check(run, calls, AnalyzeOptions(per_step=True))


def _with_power(run: Run) -> Run:
    """The run with a 100 Hz power stream over each rank's span (so energy is computed)."""
    traces = {}
    for r, tr in run.traces.items():
        s0 = int(tr.nodes["start_ns"].min())
        s1 = int((tr.nodes["start_ns"] + tr.nodes["dur_ns"]).max())
        t = np.arange(s0 - 5_000_000, s1 + 10_000_000, 10_000_000, dtype=np.int64)
        tel = tr.telemetry.clear().vstack(
            pl.DataFrame({"time_ns": t, "device": [tr.meta.device_index or 0] * t.size,
                          "power_w": 250 + 100 * np.sin(np.arange(t.size) / 3.0)}).select(
                [pl.col(c).cast(d) if c in ("time_ns", "device", "power_w") else pl.lit(None, d).alias(c)
                 for c, d in tr.telemetry.schema.items()]
            )
        )  # fmt: skip
        traces[r] = Trace(nodes=tr.nodes, deps=tr.deps, telemetry=tel, meta=tr.meta)
    return Run(traces, manifest=run.manifest, source=run.source)


@pytest.mark.skipif(not A100.exists(), reason="needs ../shared (the team's shared traces)")
def test_a100_classified_once(calls: list[int]) -> None:
    run = loader.load(A100)
    _check(run, calls, AnalyzeOptions(per_step=True))


@pytest.mark.skipif(not A100.exists(), reason="needs ../shared (the team's shared traces)")
def test_a100_with_energy_classified_once(calls: list[int]) -> None:
    run = _with_power(loader.load(A100))
    calls.clear()
    an = _check(run, calls, AnalyzeOptions(per_step=True))
    assert an.energy is not None and an.power is not None
    assert "phase" in an.classified[0].columns  # added once, for energy


def test_gloo_with_energy_classified_once(calls: list[int]) -> None:
    run = _with_power(loader.load(GLOO))
    calls.clear()
    an = _check(run, calls, AnalyzeOptions(per_step=True))
    assert an.energy is not None


def test_report_lanes_equal_with_and_without_the_classification() -> None:
    """The lanes drawn from the analysis' classification equal those classified anew."""
    run = loader.load(GLOO)
    an = analyze_run(run, AnalyzeOptions(critical_path=False))
    given = report_data(run, an)
    anew = report_data(run, an, classified={})
    assert len(given.lanes) == len(anew.lanes) == 2
    for a, b in zip(given.lanes, anew.lanes, strict=True):
        assert a.mode == b.mode and a.window == b.window
        for x, y in ((a.compute, b.compute), (a.comm, b.comm), (a.idle, b.idle)):
            assert (x[0] == y[0]).all() and (x[1] == y[1]).all()


def test_energy_takes_the_phase_once() -> None:
    """``with_phase`` of a frame that has its phase returns it as it is."""
    run = loader.load(GLOO)
    tr = run.traces[run.ranks[0]]
    ph = cl.with_phase(tr.nodes)
    assert cl.with_phase(ph) is ph
