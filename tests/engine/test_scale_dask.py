"""--scheduler: every rank read and analysed on a real Dask LocalCluster (2 process workers on
loopback, one per test module), results equal to the local path's; failing ranks, an unreachable
scheduler; fsspec ``file://`` URLs (read by the worker processes) and ``memory://`` URLs (per
process: read through ``local-threads:2``, workers in the test's process, and without a scheduler)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from charllm_trace import engine
from charllm_trace.analysis.api import analyze_run
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.cli.app import main
from charllm_trace.inputs.loader import load
from tests.conftest import FIXTURES, ROOT, shared_trace

distributed = pytest.importorskip("distributed")

GLOO = FIXTURES / "cpu-2rank-gloo"
#: frames whose rows are one rank's figures: equal to the bit. The others aggregate float sums over
#: ranks (the bandwidth summary), where the summation order may differ in the last bit.
PER_RANK = ("overlap", "overlap_by_group", "overlap_by_dim", "collectives", "collectives_matched",
            "energy_totals", "energy", "power", "throttle", "stragglers", "idle_time", "launch_stats",
            "launch_queue", "config", "breakdown", "breakdown_totals", "flops", "flops_by_op",
            "flops_devices", "rank_spread", "critical_path", "critical_path_ops", "what_if",
            "pipeline_microbatches", "pipeline_stages", "comm_wait", "comm_wait_by_rank")  # fmt: skip
#: the frames of the analyses computed per rank on a worker and merged on the driver since the
#: merge of main (idle time, launches, time breakdown, FLOP/s, stragglers, the run's configuration)
MERGED = ("stragglers", "idle_time", "launch_stats", "launch_queue", "config", "breakdown",
          "breakdown_totals", "flops", "flops_by_op", "flops_devices", "rank_spread")  # fmt: skip


@pytest.fixture(scope="module")
def dask_cluster():
    """A LocalCluster of 2 worker processes on loopback; its workers import this checkout."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")] + ([old] if old else []))
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture
def scheduler(dask_cluster, monkeypatch):
    monkeypatch.setenv(engine.ENV, dask_cluster)
    yield dask_cluster


def _local(path: str | Path, options: AnalyzeOptions):
    return analyze_run(load(path, cache=False), options)


def _distributed(path: str, options: AnalyzeOptions, ranks=None, sample=None):
    """Through the service, on the cluster the ``scheduler`` fixture names (in the environment
    variable the CLI's --scheduler defaults to; the library reads it nowhere)."""
    from charllm_trace import service

    req = service.Request(ranks=None if ranks is None else tuple(ranks), sample=sample, cache=False)
    return service.analyze(path, options, req, scheduler=os.environ[engine.ENV]).results()


def assert_same_analysis(local, dist) -> None:
    """Every frame, note and skipped reason of ``local`` in ``dist``, the execution-graph analyses
    (critical path, what-if) included."""
    assert dist.ranks == local.ranks
    assert dist.simulated == local.simulated
    lf, df = local.frames(), dist.frames()
    assert set(lf) == set(df)
    for name, f in lf.items():
        if name in PER_RANK:
            assert f.equals(df[name], null_equal=True), name
        else:
            assert_frame_equal(f, df[name], check_exact=False, rel_tol=1e-12, abs_tol=0.0)
    assert dist.notes() == {k: v for k, v in local.notes().items() if k in dist.notes()}
    assert local.skipped == dist.skipped
    assert (local.critical_path is None) == (dist.critical_path is None)
    assert (local.what_if is None) == (dist.what_if is None)
    if local.what_if is not None:
        assert dist.what_if.fixed_wait_pct == local.what_if.fixed_wait_pct
        assert dist.what_if.factors == local.what_if.factors
    assert dist.bandwidth is not None and local.bandwidth is not None
    assert dist.bandwidth.peaks == local.bandwidth.peaks


def test_analyze_dlrm_8_ranks_equals_local(scheduler):
    d = shared_trace("param/dlrm_8ranks_v100")
    opts = AnalyzeOptions(per_step=True)
    local, dist = _local(d, opts), _distributed(str(d), opts)
    assert dist.ranks == list(range(8))
    assert dist.bandwidth.matched.height > 0  # matched across ranks on the driver
    frames = local.frames()
    assert [k for k in MERGED if k not in frames or frames[k].height == 0] == []
    assert dist.breakdown is not None and dist.breakdown.by["rank"].null_count() > 0  # all-ranks rows
    assert_same_analysis(local, dist)
    # the critical paths: each rank's and the job's, walked on the workers, merged on the driver
    cp = dist.critical_path.paths
    assert cp.filter(pl.col("scope") == "job").height == 1 and cp["rank"].drop_nulls().n_unique() == 8
    assert dist.critical_path.top_ops.height > 0


def test_analyze_fixture_run_equals_local(scheduler):
    opts = AnalyzeOptions(per_step=True)
    local, dist = _local(GLOO, opts), _distributed(str(GLOO), opts)
    assert dist.overlap is not None and dist.bandwidth.matched.height > 0
    assert_same_analysis(local, dist)
    one = _distributed(str(GLOO), opts, ranks=[1])
    assert one.ranks == [1]
    assert_same_analysis(analyze_run(load(GLOO, cache=False).select([1]), opts), one)


def test_pipeline_and_comm_wait_equal_local(scheduler):
    # the pipeline view and the waiting/transfer split: parts on the workers, matched on the driver
    run = FIXTURES / "cpu-4rank-pp2-dp2"
    opts = AnalyzeOptions(critical_path=False)
    local, dist = _local(run, opts), _distributed(str(run), opts)
    assert dist.pipeline is not None and dist.pipeline.stages.height == 8
    assert dist.comm_wait is not None and dist.comm_wait.ops.height == 64
    assert_same_analysis(local, dist)


@pytest.mark.parametrize("what_if", [{"comm": 0.5, "gemm": 0.8}, {"launch": 0.0}])
@pytest.mark.parametrize("per_step", [True, False])
def test_critical_path_and_what_if_equal_local(scheduler, what_if, per_step):
    """The critical path and a what-if replay through the cluster: the same rows, numbers, notes and
    unexplained-wait share as the local path (paths cross ranks at collectives: rank 0's whole-trace
    path goes on in rank 1)."""
    opts = AnalyzeOptions(per_step=per_step, what_if=what_if)
    local, dist = _local(GLOO, opts), _distributed(str(GLOO), opts)
    assert dist.critical_path is not None and dist.what_if is not None
    assert dist.what_if.steps.height == local.what_if.steps.height > 0
    assert "0,1" in dist.critical_path.paths["ranks_on_path"].to_list()  # a path across both ranks
    assert_same_analysis(local, dist)
    off = AnalyzeOptions(per_step=per_step, critical_path=False, what_if=what_if)
    assert_same_analysis(_local(GLOO, off), _distributed(str(GLOO), off))


def test_what_if_dlrm_8_ranks_equals_local(scheduler):
    d = shared_trace("param/dlrm_8ranks_v100")
    opts = AnalyzeOptions(per_step=True, what_if={"comm": 0.5})
    assert_same_analysis(_local(d, opts), _distributed(str(d), opts))


def test_parts_gathered_in_batches_equal_local(scheduler, monkeypatch):
    """The driver gathers the ranks' parts a batch at a time, releasing each batch (issue 11: the
    driver's memory at 1,024 ranks); the analysis is the local path's."""
    from charllm_trace.engine import cluster

    monkeypatch.setattr(cluster, "GATHER_BATCH", 3)
    released: list[int] = []
    release = cluster.DaskEngine.release
    monkeypatch.setattr(
        cluster.DaskEngine, "release", lambda self, h: (released.append(len(h)), release(self, h))
    )
    d = shared_trace("param/dlrm_8ranks_v100")
    opts = AnalyzeOptions(per_step=True)
    dist = _distributed(str(d), opts)
    # the parts, in batches (then the graph rounds' and the ranks' own releases)
    assert any(released[i : i + 3] == [3, 3, 2] for i in range(len(released))), released
    assert_same_analysis(_local(d, opts), dist)


def test_info_and_convert_equal_local(scheduler, tmp_path):
    d = shared_trace("param/dlrm_8ranks_v100")
    r = CliRunner()
    for path in (str(d), str(GLOO)):
        a = r.invoke(main, ["info", path, "--json", "--no-cache"], env={engine.ENV: ""})
        b = r.invoke(main, ["info", path, "--json", "--no-cache"])
        assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
        assert json.loads(a.output) == json.loads(b.output)
    out_l, out_d = tmp_path / "local", tmp_path / "dist"
    assert (
        r.invoke(
            main, ["convert", str(GLOO), "-o", str(out_l), "--workers", "1"], env={engine.ENV: ""}
        ).exit_code
        == 0
    )
    res = r.invoke(main, ["convert", str(GLOO), "-o", str(out_d)])
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in out_l.glob("rank-*.et"))
    assert names == ["rank-0.et", "rank-1.et"] == sorted(p.name for p in out_d.glob("rank-*.et"))
    for n in names:
        assert (out_l / n).read_bytes() == (out_d / n).read_bytes()
    assert not [p for p in out_d.iterdir() if ".partial-" in p.name]  # nothing left half written
    again = r.invoke(main, ["convert", str(GLOO), "-o", str(out_d)])
    assert again.exit_code == 2 and "already exists" in again.output


def _broken_copy(tmp_path: Path) -> tuple[Path, Path]:
    d = shared_trace("param/dlrm_8ranks_v100")
    run = tmp_path / "run"
    shutil.copytree(d, run)
    bad = run / "kineto_rank3.json.gz"
    os.chmod(bad, 0o644)
    doc = gzip.decompress(bad.read_bytes())
    bad.write_bytes(gzip.compress(doc[: len(doc) // 2]))  # a profile cut in the middle: the worker fails
    return run, bad


def test_failing_rank_exit_2_or_keep_going(scheduler, tmp_path):
    run, bad = _broken_copy(tmp_path)
    r = CliRunner()
    res = r.invoke(main, ["analyze", str(run), "--no-cache", "--format", "json"])
    assert res.exit_code == 2
    line = res.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {bad}:") and "--keep-going" in line
    res = r.invoke(main, ["analyze", str(run), "--no-cache", "--format", "json", "--keep-going"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["ranks"] == [0, 1, 2, 4, 5, 6, 7]
    said = " ".join(n for notes in doc["notes"].values() for n in notes)
    assert "--keep-going" in said and str(bad) in said
    # written to a file: the reduction runs on a worker (engine/driver.reduce_task); the same
    # one line for the bad file, the same notes printed here, the same document
    got = tmp_path / "res.json"
    res = r.invoke(main, ["analyze", str(run), "--no-cache", "--format", "json", "-o", str(got)])
    assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == line
    assert not got.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    res = r.invoke(main, ["analyze", str(run), "--no-cache", "--format", "json", "-o", str(got), "--keep-going"])
    assert res.exit_code == 0, res.output
    assert json.loads(got.read_bytes()) == doc
    assert f"--keep-going: 1 rank file(s) could not be read and are left out ({bad}:" in res.stderr
    out = tmp_path / "et"
    res = r.invoke(main, ["convert", str(run), "-o", str(out)])
    assert res.exit_code == 2 and str(bad) in res.output
    assert not [p for p in out.iterdir() if p.name != ".charllm-trace-convert"]  # nothing written half
    res = r.invoke(main, ["convert", str(run), "-o", str(out), "--keep-going"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.glob("rank-*.et")) == [f"rank-{i}.et" for i in (0, 1, 2, 4, 5, 6, 7)]


def test_unreachable_scheduler_is_one_line_exit_2(monkeypatch):
    monkeypatch.setenv("CHARLLM_TRACE_SCHEDULER_TIMEOUT", "1")
    res = CliRunner().invoke(main, ["info", str(GLOO), "--scheduler", "tcp://127.0.0.1:9"])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: cannot reach the Dask scheduler at tcp://127.0.0.1:9"
    )


def test_file_urls_read_by_workers_and_written_whole(scheduler, tmp_path):
    url = GLOO.resolve().as_uri()  # file:///...
    opts = AnalyzeOptions(per_step=True)
    assert_same_analysis(_local(GLOO, opts), _distributed(url, opts))
    out = (tmp_path / "res.json").as_uri()
    res = CliRunner().invoke(main, ["analyze", url, "--no-cache", "--format", "json", "-o", out])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "res.json").read_bytes())
    assert doc["ranks"] == [0, 1] and doc["source"] == url
    missing = CliRunner().invoke(main, ["info", url + "-nope", "--json"])
    assert missing.exit_code == 2 and missing.output.startswith(f"error: {url}-nope: ")


def _memory_gloo():
    import fsspec

    fs = fsspec.filesystem("memory")
    for f in GLOO.iterdir():
        fs.pipe(f"/gloo/{f.name}", f.read_bytes())
    return fs


def test_memory_urls_without_a_scheduler(monkeypatch):
    """A ``memory://`` input is copied here and read by the local path (graph analyses
    included); outputs are uploaded whole, and refused when they exist."""
    fs = _memory_gloo()
    monkeypatch.delenv(engine.ENV, raising=False)
    opts = AnalyzeOptions(per_step=True)
    local = _local(GLOO, opts)
    plain = analyze_run(load("memory://gloo", cache=False), opts)
    assert plain.critical_path is not None
    assert local.frames()["critical_path"].equals(plain.frames()["critical_path"])
    assert_same_analysis(local, plain)
    res = CliRunner().invoke(main, ["convert", "memory://gloo", "-o", "memory://gloo-et"])
    assert res.exit_code == 0, res.output
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls("/gloo-et", detail=False)) == [
        ".charllm-trace-convert", "rank-0.et", "rank-1.et"
    ]  # fmt: skip
    again = CliRunner().invoke(main, ["convert", "memory://gloo", "-o", "memory://gloo-et"])
    assert again.exit_code == 2 and "refusing to overwrite" in again.output
    for _ in range(2):
        res = CliRunner().invoke(main, ["report", "memory://gloo", "-o", "memory://out/r.html", "--no-cache"])
    assert res.exit_code == 2 and "already exists" in res.output
    assert fs.cat_file("/out/r.html").startswith(b"<!DOCTYPE html>")
    for d in ("/gloo", "/gloo-et", "/out"):
        fs.rm(d, recursive=True)


@pytest.mark.cluster  # a Dask scheduler and two thread workers in this process
def test_memory_urls_on_thread_workers(monkeypatch):
    """``memory://`` is per process: workers in this process (``local-threads:2``) each read
    their rank from the URL, and write the converted ranks there."""
    fs = _memory_gloo()
    opts = AnalyzeOptions(per_step=True)
    monkeypatch.delenv(engine.ENV, raising=False)
    local = _local(GLOO, opts)
    monkeypatch.setenv(engine.ENV, "local-threads:2")
    assert_same_analysis(local, _distributed("memory://gloo", opts))
    res = CliRunner().invoke(main, ["info", "memory://gloo", "--json", "--no-cache"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["ranks"] == [0, 1]
    res = CliRunner().invoke(main, ["convert", "memory://gloo", "-o", "memory://gloo-et"])
    assert res.exit_code == 0, res.output
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls("/gloo-et", detail=False)) == [
        ".charllm-trace-convert", "rank-0.et", "rank-1.et"
    ]  # fmt: skip
    for d in ("/gloo", "/gloo-et"):
        fs.rm(d, recursive=True)


def test_no_dask_import_without_a_scheduler(spawn, tmp_path):
    """The local path stays as it was: analyze, info and convert import nothing of Dask or fsspec."""
    code = f"""
import sys
from click.testing import CliRunner
from charllm_trace.cli.app import main
r = CliRunner()
for args in (["analyze", {str(GLOO)!r}, "--no-cache"], ["info", {str(GLOO)!r}], ["convert", {str(GLOO)!r}, "-o", {str(tmp_path / "et")!r}]):
    res = r.invoke(main, args)
    assert res.exit_code == 0, res.output
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed", "fsspec"))
assert not bad, bad
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(engine.ENV, None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_check_through_the_scheduler(scheduler, tmp_path):
    base = tmp_path / "b.json"
    r = CliRunner()
    res = r.invoke(main, ["baseline", str(GLOO), "-o", str(base)])
    assert res.exit_code == 0, res.output
    assert "baseline runs in this process" in res.output  # said, on stderr
    res = r.invoke(main, ["check", str(GLOO), "--baseline", str(base)])
    assert res.exit_code == 0, res.output


def test_frames_cross_the_wire_without_node_tables(scheduler):
    """What a worker sends back for a rank is its part: no node table."""
    import pickle

    from charllm_trace.analysis.api import dims_of
    from charllm_trace.analysis.bandwidth import hosts_of
    from charllm_trace.engine.plan import plan
    from charllm_trace.engine.tasks import analyze_task, load_rank

    spec = plan(str(GLOO)).specs[0]
    loaded = load_rank(spec)
    opts = AnalyzeOptions()
    part = analyze_task(loaded, opts, dims_of([loaded.trace.meta.process_groups], {}, opts), hosts_of({}, {}))
    assert part.trace is None and part.classified is None
    assert isinstance(part.parts["bandwidth"].coll, pl.DataFrame)
    assert len(pickle.dumps(part)) < len(pickle.dumps(loaded.trace)) / 5


def test_et_directory_equals_local(scheduler, gloo_ets):
    """A directory of per-rank ETs: each worker reads one file (its rank from its header)."""
    opts = AnalyzeOptions(per_step=True)
    assert_same_analysis(_local(gloo_ets, opts), _distributed(str(gloo_ets), opts))


def test_ranks_and_sample_chosen_as_the_local_path(scheduler):
    """--ranks and --sample choose the same ranks on the cluster as on the local path, the rank
    spread over them equal too."""
    d = shared_trace("param/dlrm_8ranks_v100")
    opts = AnalyzeOptions(per_step=True)
    for ranks, sample in ((None, 3), ([0, 2, 3, 4, 5, 7], 2)):
        local = analyze_run(load(d, cache=False, ranks=ranks, sample=sample), opts)
        dist = _distributed(str(d), opts, ranks, sample)
        assert len(dist.ranks) == sample and dist.ranks == local.ranks
        assert dist.overlap is not None and dist.overlap.rank_spread.height > 0
        assert_same_analysis(local, dist)


def test_imported_telemetry_run_equals_local(scheduler, tmp_path):
    """A run with an imported power log (``telemetry import``): energy and power on the workers,
    each rank's note naming the log, equal to the local path's."""
    run = tmp_path / "run"
    shutil.copytree(GLOO, run)
    logs = ROOT / "tests" / "fixtures" / "telemetry_logs"
    r = CliRunner().invoke(
        main,
        ["telemetry", "import", str(run), str(logs / "zeus-powermonitor.csv"), "--format", "zeus",
         "--device-map", "0=0,1=1"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    opts = AnalyzeOptions(per_step=True)
    local, dist = _local(run, opts), _distributed(str(run), opts)
    assert dist.energy is not None and dist.power is not None
    assert dist.energy.totals["n_samples"].to_list() == [8, 8]
    assert any("zeus log zeus-powermonitor.csv" in n for n in dist.energy.notes)
    assert_same_analysis(local, dist)


def _die_once(marker: str) -> int:
    """Kills its worker process the first time it runs (a worker that dies mid-job)."""
    if not os.path.exists(marker):
        Path(marker).write_text("died")
        os._exit(1)
    return 42


def test_a_task_whose_worker_dies_is_run_again(dask_cluster, tmp_path):
    from charllm_trace.engine.cluster import open_engine

    marker = tmp_path / "died"
    with open_engine(dask_cluster) as eng:
        assert eng.gather(eng.map(_die_once, [str(marker)])) == [42]
    assert marker.read_text() == "died"
