"""Ranks of two collections in one run folder (issue 28): without run ids, the ranks' traced spans
tell. The gloo fixture's rank 1 moved 30 s later (a skewed clock) still reads as one run; moved an
hour later (another collection) it is refused, one line, exit 2."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from tests.conftest import FIXTURES


def _shifted(tmp_path: Path, seconds: int) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "cpu-2rank-gloo", run)
    p = run / "rank-1.kineto.json.gz"
    doc = orjson.loads(gzip.decompress(p.read_bytes()))
    doc["baseTimeNanoseconds"] += seconds * 10**9
    p.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=1))
    return run


@pytest.mark.parametrize(("seconds", "refused"), [(30, False), (3600, True)])
def test_ranks_traced_far_apart_are_two_collections(tmp_path: Path, seconds: int, refused: bool) -> None:
    run = _shifted(tmp_path, seconds)
    r = CliRunner().invoke(main, ["info", str(run), "--no-cache"])
    if not refused:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == (
        f"error: {run}: rank 1 was traced 3,600 s after rank 0's trace ended: files of two collections "
        "in one folder? (the ranks of a run trace the same steps)"
    )


def test_a_telemetry_csv_no_metadata_names_is_said(tmp_path: Path, cache_dir: Path) -> None:
    """A CSV that no ``telemetry-*.meta.json`` names is never read: a note says so on every read
    (from the cache too), instead of nothing."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "cpu-2rank-gloo", run)
    (run / "telemetry-other.csv").write_bytes(b"garbage\x00\xff")
    want = f"note: {run}: ignored 1 telemetry CSV(s) that no telemetry metadata names (telemetry-other.csv): not read"
    for _ in range(2):  # converted, then from the cache
        r = CliRunner().invoke(main, ["analyze", str(run), "--format", "json", "--no-critical-path"])
        assert r.exit_code == 0, r.output
        assert want in r.stderr.splitlines(), r.stderr
    clean = CliRunner().invoke(main, ["analyze", str(FIXTURES / "cpu-2rank-gloo"), "--no-critical-path"])
    assert "telemetry CSV" not in clean.stderr
