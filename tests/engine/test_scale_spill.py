"""Rank rows written by the workers (``engine/spill.py``, ``analysis/rank_rows.py``; issue 26
item 3): with a spill location the driver holds none of them, and every output equals the one
built from the rows held in memory — the JSON byte for byte, each CSV byte for byte, each Parquet
file's frame to the bit — through a real LocalCluster of 2 process workers."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, shared_trace

from charllm_trace.analysis.rank_rows import BREAKDOWN_ROWS, RANK_ROWS
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.cli.app import main
from charllm_trace.engine import Cluster
from charllm_trace.engine.driver import analyze_distributed
from tests.engine.test_scale_dask import dask_cluster  # noqa: F401  (the fixture)

pytest.importorskip("distributed")

SPILLED = {rr.frame for rr in RANK_ROWS} | set(BREAKDOWN_ROWS)


def _run(args: list[str]) -> str:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return r.stdout


def _dlrm():
    return shared_trace("param/dlrm_8ranks_v100")


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--per-step", "--breakdown-top", "3", "--no-critical-path"],
        ["--ranks", "3", "--no-critical-path"],
    ],
    ids=["default", "per-step-top3", "one-rank"],
)
def test_json_written_from_rank_files_equals_the_held_rows(spawn, tmp_path, dask_cluster, extra):  # noqa: F811
    run = _dlrm()
    common = ["analyze", str(run), "--no-cache", "--scheduler", dask_cluster, "--format", "json", *extra]
    held = _run(common).encode()  # to stdout: no spill location, every row held by the driver
    out = tmp_path / "res.json"
    _run([*common, "-o", str(out)])  # beside -o: the workers write their ranks' rows
    assert out.read_bytes() == held
    doc = json.loads(held)
    assert sum(len(doc["frames"][f]) for f in SPILLED) > 100  # the spilled frames have rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.json"]  # the rank files removed


def test_csv_and_parquet_written_from_rank_files(spawn, tmp_path, dask_cluster):  # noqa: F811
    run = _dlrm()
    common = ["analyze", str(run), "--no-cache", "--scheduler", dask_cluster, "--no-critical-path"]
    held = _run([*common, "--format", "csv"])  # to stdout: rows held
    by_frame = {}
    for block in held.split("# ")[1:]:
        name, _, body = block.partition("\n")
        by_frame[name] = body
    _run([*common, "--format", "csv", "-o", str(tmp_path / "r.csv")])
    _run([*common, "--format", "parquet", "-o", str(tmp_path / "r.parquet")])
    whole = analyze_distributed(str(run), AnalyzeOptions(critical_path=False), cluster=Cluster(dask_cluster))
    assert not whole.spilled
    for name, df in whole.frames().items():
        assert (tmp_path / f"r.{name}.csv").read_text() == by_frame[name], name
        got = pl.read_parquet(tmp_path / f"r.{name}.parquet")
        assert got.equals(df), name
    assert {p.name for p in tmp_path.iterdir() if p.name.startswith(".")} == set()


def test_results_with_rank_files_equal_the_held_ones(tmp_path, dask_cluster):  # noqa: F811
    """The library: with a spill location the merge runs on a worker and the result that comes
    back holds no rows: every frame with rows names its files (the ranks' own rows, then the
    merged rows); loaded back it equals the one merged with every row held, frame for frame
    (the 2-rank fixture run and the DLRM set, --per-step)."""
    for run in (FIXTURES / "cpu-2rank-gloo", _dlrm()):
        opts = AnalyzeOptions(per_step=True)
        held = analyze_distributed(str(run), opts, cluster=Cluster(dask_cluster))
        where = tmp_path / Path(run).name
        spilled = analyze_distributed(str(run), opts, cluster=Cluster(dask_cluster), spill=str(where))
        with_rows = {name for name, df in held.frames().items() if df.height}
        assert len(with_rows) > 5
        assert set(spilled.spilled) == with_rows
        assert all(df.height == 0 for df in spilled.frames().values())  # none held here
        assert (where / "held").is_dir()  # the merged rows, written by the worker that merged
        assert any((where / name).is_dir() for name in SPILLED) or Path(run).name == "cpu-2rank-gloo"
        loaded = spilled.with_rows()
        a, b = held.frames(), loaded.frames()
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].equals(b[name]), (run, name)
        assert held.notes() == loaded.notes() and held.skipped == loaded.skipped
