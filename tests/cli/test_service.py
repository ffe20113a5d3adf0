"""One road from an input to results (issue 23 item 1): every command that analyses a run —
``analyze``, ``report``, ``check``, ``baseline``, ``diff``, ``compare`` — and the library's
``charllm_trace.analyze`` go through ``service.analyze``, and nothing loads or analyses a trace
outside it; the Dask scheduler is an argument handed down to the engine (never written to
``os.environ``); URL inputs are analysed with the cache on, their results cached by content."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import charllm_trace
import charllm_trace.analysis.api
import charllm_trace.inputs.loader
from charllm_trace import engine, service
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.cli.app import main
from charllm_trace.engine import Cluster
from tests.conftest import FIXTURES

GLOO = FIXTURES / "cpu-2rank-gloo"
GLOO_BASELINE = FIXTURES / "cpu-2rank-gloo.baseline.json"


def _ok(*args: str, env: dict[str, str] | None = None) -> str:
    r = CliRunner().invoke(main, list(args), env=env)
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.fixture
def road(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, service.Request]]:
    """Records every ``service.analyze`` call (source, request); loading a trace or running the
    analyses outside such a call fails the test."""
    calls: list[tuple[str, service.Request]] = []
    inside = [0]
    real_analyze = service.analyze

    def spy(source: Any, options: Any = None, request: Any = None, **kw: Any) -> Any:
        calls.append((os.fspath(source), request or service.Request()))
        inside[0] += 1
        try:
            return real_analyze(source, options, request, **kw)
        finally:
            inside[0] -= 1

    def only_inside(name: str, real: Any) -> Any:
        def guarded(*a: Any, **k: Any) -> Any:
            assert inside[0], f"{name} was called outside service.analyze"
            return real(*a, **k)

        return guarded

    monkeypatch.setattr(service, "analyze", spy)
    monkeypatch.setattr(charllm_trace.inputs.loader, "load", only_inside("loader.load", charllm_trace.inputs.loader.load))
    api = charllm_trace.analysis.api
    monkeypatch.setattr(api, "analyze_run", only_inside("analyze_run", api.analyze_run))
    return calls


# --no-cache analyses the runs again in each of the 11 commands: 13 s alone on the 2-core machine
# (docs/benchmarks.md), out of the fast tier; [True] drives the same commands through the service
@pytest.mark.parametrize("cache", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_every_command_reaches_the_service(
    road: list[tuple[str, service.Request]], cache_dir: Path, tmp_path: Path, cache: bool
) -> None:
    g, other = str(GLOO), str(FIXTURES / "h200-1rank-nccl")
    off = () if cache else ("--no-cache",)
    saved = str(tmp_path / "gloo.zip")
    commands: list[tuple[list[str], list[str]]] = [
        (["analyze", g, "--format", "json", "--save", saved, *off], [g]),
        (["analyze", saved, "--format", "json"], [saved]),
        (["report", g, "-o", str(tmp_path / "r.html"), *off], [g]),
        (["report", saved, "-o", str(tmp_path / "s.html")], [saved]),
        (["check", g, "--baseline", str(GLOO_BASELINE), *off], [g]),
        (["baseline", g, "-o", str(tmp_path / "b.json"), *off], [g]),
        (["diff", g, other, "--format", "json", *off], [g, other]),
        (["compare", g, other, saved, "--format", "json", *off], [g, other, saved]),
    ]
    for args, sources in commands:
        road.clear()
        _ok(*args)
        assert [s for s, _ in road] == sources, args
    # what each asked for beside the results
    road.clear()
    _ok("diff", g, other, *off)
    assert all(req.run for _, req in road)  # the per-operator comparison reads the nodes
    road.clear()
    _ok("compare", g, other, *off)
    assert all(req.row for _, req in road)
    road.clear()
    _ok("report", g, "-o", str(tmp_path / "r2.html"), "--ranks", "1", *off)
    ((_, req),) = road
    assert req.views and req.ranks == (1,)
    entries = list((cache_dir / "results").iterdir()) if (cache_dir / "results").is_dir() else []
    assert bool(entries) == cache  # --no-cache: nothing stored by any of them


def test_the_library_api_is_the_service(road: list[tuple[str, service.Request]], cache_dir: Path) -> None:
    got = charllm_trace.analyze(GLOO, AnalyzeOptions(per_step=True))
    assert [s for s, _ in road] == [str(GLOO)] and not got.hit
    assert got.results().ranks == [0, 1] and got.source == str(GLOO)
    again = charllm_trace.analyze(str(GLOO), AnalyzeOptions(per_step=True))
    assert again.hit and again.results().frames()["overlap"].equals(got.results().frames()["overlap"])


def test_cache_hits_give_check_baseline_and_diff_what_they_gave_without_it(
    cache_dir: Path, tmp_path: Path
) -> None:
    """check, baseline and diff now use the results cache: the same bytes as with --no-cache,
    whether the entry was written by themselves or by another command with the same options."""
    g, other = str(GLOO), str(FIXTURES / "h200-1rank-nccl")
    commands = [
        ["check", g, "--baseline", str(GLOO_BASELINE), "--format", "json", "--all"],
        ["diff", g, other, "--format", "json"],
    ]
    fresh = [_ok(*c, "--no-cache") for c in commands]
    assert not (cache_dir / "results").exists()
    for _ in range(2):  # the first stores the entries, the second reads them
        assert [_ok(*c) for c in commands] == fresh
    base = [tmp_path / f"b{i}.json" for i in range(3)]
    _ok("baseline", g, "-o", str(base[0]), "--no-cache")
    _ok("baseline", g, "-o", str(base[1]))
    _ok("baseline", g, "-o", str(base[2]))
    assert base[0].read_bytes() == base[1].read_bytes() == base[2].read_bytes()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Cluster, str | None]]:
    """``engine.driver.analyze_distributed`` replaced by the local analysis; records the cluster it
    was handed and the scheduler variable of the environment at that moment."""
    from charllm_trace.engine import driver

    seen: list[tuple[Cluster, str | None]] = []

    def fake(path: str, options: Any, ranks: Any = None, *, cluster: Cluster, **_k: Any) -> Any:
        seen.append((cluster, os.environ.get(engine.ENV)))
        from charllm_trace.analysis.api import analyze_run

        return analyze_run(charllm_trace.inputs.loader.load(path, ranks=ranks), options)

    monkeypatch.setattr(driver, "analyze_distributed", fake)
    return seen


def test_the_scheduler_is_an_argument_handed_to_the_engine(
    fake_cluster: list[tuple[Cluster, str | None]],
    cache_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(engine.ENV, raising=False)
    g = str(GLOO)
    local = _ok("analyze", g, "--format", "json", "--no-cache")
    assert not fake_cluster
    before = _env()
    out = _ok("analyze", g, "--format", "json", "--scheduler", "tcp://sched:1", "--keep-going")
    assert out == local and fake_cluster == [(Cluster("tcp://sched:1", keep_going=True), None)]
    _ok("check", g, "--baseline", str(GLOO_BASELINE), "--scheduler", "tcp://sched:2")
    assert fake_cluster[-1] == (Cluster("tcp://sched:2"), None)  # handed down, not put in os.environ
    assert _env() == before
    # the environment variable is the CLI's default, read by click, not by the library
    _ok("analyze", g, "--format", "json", env={engine.ENV: "tcp://from-env:3"})
    assert fake_cluster[-1][0] == Cluster("tcp://from-env:3") and _env() == before
    # commands that need every rank's nodes say so and run here
    n = len(fake_cluster)
    b = str(tmp_path / "b.json")
    r = CliRunner().invoke(main, ["baseline", g, "-o", b, "--scheduler", "tcp://x:4"])
    assert r.exit_code == 0 and "baseline runs in this process" in r.stderr and len(fake_cluster) == n
    # the library: only an argument sends work to a cluster; the variable is not read
    monkeypatch.setenv(engine.ENV, "tcp://ignored:5")
    service.analyze(g)
    assert len(fake_cluster) == n
    service.analyze(g, AnalyzeOptions(per_step=True), scheduler="tcp://lib:6")
    assert fake_cluster[-1][0] == Cluster("tcp://lib:6") and len(fake_cluster) == n + 1
    # a request that needs the nodes is met here even with a scheduler
    got = service.analyze(g, None, service.Request(views=True), scheduler=Cluster("tcp://lib:7"))
    assert got.views is not None and len(fake_cluster) == n + 1


def test_a_url_is_analysed_with_the_cache_on_and_its_results_cached(
    gloo_ets: Path, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("fsspec")
    et = next(gloo_ets.glob("*.et"))
    url = et.resolve().as_uri()
    assert url.startswith("file:///")
    opts = ("--format", "json", "--no-critical-path")
    fresh = _ok("analyze", url, *opts, "--no-cache")
    assert json.loads(fresh)["source"] == url
    assert _ok("analyze", url, *opts) == fresh  # stored
    (entry,) = (cache_dir / "results").iterdir()

    def no_load(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the URL's trace was loaded on a hit")

    with monkeypatch.context() as m:
        m.setattr(charllm_trace.inputs.loader, "load_copy", no_load)
        assert _ok("analyze", url, *opts) == fresh  # read back, the URL named as given (// kept)
    # the same bytes under a local path share the entry (keyed by content), each named as given
    local = json.loads(_ok("analyze", str(et), *opts))
    assert local["source"] == str(et) and list((cache_dir / "results").iterdir()) == [entry]
    _ok("report", url, "-o", str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").read_bytes().startswith(b"<!DOCTYPE html>")
