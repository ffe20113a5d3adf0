"""``analyze --format json`` of 16 generated ranks (benchmarks/make_many_ranks.py from the shared
DLRM set: every collective matched across all 16, stragglers by design) through a Dask
LocalCluster equals the local path's document (issue 26 item 3: the check any change to what
workers return must keep). Numbers equal; floats to a relative 1e-12 (sums over ranks, in
another order after a frame crosses the wire: docs/scale.md)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, shared_trace

from charllm_trace.cli.app import main
from tests.engine.test_scale_dask import dask_cluster  # noqa: F401  (the fixture)

pytest.importorskip("distributed")


def _same(a, b, where="") -> int:
    """Assert ``a`` equals ``b`` (floats to 1e-12 relative); the number of values compared."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        return sum(_same(a[k], b[k], f"{where}/{k}") for k in a)
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        return sum(_same(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True)))
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0), (where, a, b)
    else:
        assert a == b, (where, a, b)
    return 1


def _analyze(run, out):
    r = CliRunner().invoke(main, ["analyze", str(run), "--no-cache", "--format", "json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    doc.pop("source", None)
    return doc


def generated_run(ranks: int, run: Path) -> Path:
    """``benchmarks/make_many_ranks.py``: the shared DLRM 8-rank set renumbered to ``ranks`` ranks
    in ``run`` (a child process: the tests that call it request ``spawn``)."""
    src = shared_trace("param/dlrm_8ranks_v100")
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "make_many_ranks.py"),
        str(ranks),
        str(run),
        "--source",
        str(src),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    return run


def test_16_generated_ranks_json_equals_local(spawn, tmp_path, monkeypatch, dask_cluster):  # noqa: F811
    run = generated_run(16, tmp_path / "r16")
    local = _analyze(run, tmp_path / "local.json")
    from charllm_trace import engine

    monkeypatch.setenv(engine.ENV, dask_cluster)
    dist = _analyze(run, tmp_path / "dist.json")
    assert len(local["ranks"]) == 16
    # the graph rounds ran (a path per rank, and the job's)
    assert len(local["frames"]["critical_path"]) >= 16
    assert _same(local, dist) > 1000
