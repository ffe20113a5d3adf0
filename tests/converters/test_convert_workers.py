"""``convert`` of a run directory with worker processes that write their ranks' ETs themselves
(inputs/convert_ranks.py, issue 26 item 4) writes the files, the marker, the lines and the notes
that converting in one process writes (``--workers 1``: ``convert_path`` then ``write_run``)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from conftest import FIXTURES, ROOT, shared_trace

from charllm_trace.cli.app import main

GLOO = FIXTURES / "cpu-2rank-gloo"


def _convert(run: Path, out: Path, workers: int, *extra: str):
    r = CliRunner().invoke(main, ["convert", str(run), "-o", str(out), "--workers", str(workers), *extra])
    return r.exit_code, r.stdout.replace(str(out), "OUT"), r.stderr.replace(str(out), "OUT")


def _files(d: Path) -> dict[str, bytes]:
    """Each file's bytes (a .gz file's decompressed: its header holds the time and a temporary name)."""
    return {
        p.name: gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
        for p in sorted(d.iterdir())
    }


def _same_as_one_process(run: Path, tmp_path: Path, *extra: str) -> dict[str, bytes]:
    many = _convert(run, tmp_path / "many", 2, *extra)
    one = _convert(run, tmp_path / "one", 1, *extra)
    assert many[0] == 0, many
    assert many == one
    files = _files(tmp_path / "many")
    assert files == _files(tmp_path / "one")
    return files


def test_fixture_run_written_by_workers_equals_one_process(spawn, tmp_path):  # worker processes
    files = _same_as_one_process(GLOO, tmp_path)
    assert sorted(files) == [".charllm-trace-convert", "rank-0.et", "rank-1.et"]  # no temporaries left


def test_gz_and_force_over_an_earlier_conversion(spawn, tmp_path):  # worker processes
    for out in ("many", "one"):
        assert _convert(GLOO, tmp_path / out, 1)[0] == 0  # rank-N.et there, then replaced by .et.gz
    files = _same_as_one_process(GLOO, tmp_path, "--gz", "--force")
    assert sorted(files) == [".charllm-trace-convert", "rank-0.et.gz", "rank-1.et.gz"]


def test_partial_run_labelled_as_in_one_process(spawn, tmp_path):  # worker processes
    """A finished run whose manifest names 3 ranks, 2 present: the run's manifest (the ETs'
    header) gets the partial label, which the workers could not know: converted again here."""
    run = tmp_path / "run"
    shutil.copytree(GLOO, run)
    m = json.loads((run / "manifest.json").read_text())
    m["world_size"], m["ranks_traced"] = 3, [0, 1, 2]
    (run / "manifest.json").write_text(json.dumps(m))
    code, _, err = _convert(run, tmp_path / "refused", 2)
    assert code == 2 and "rank" in err
    assert not any((tmp_path / "refused").glob(".partial-*"))
    _same_as_one_process(run, tmp_path, "--allow-partial")
    assert b"partial" in (tmp_path / "many" / "rank-0.et").read_bytes()


def test_a_rank_that_fails_leaves_no_file(spawn, tmp_path):  # worker processes
    run = tmp_path / "run"
    shutil.copytree(GLOO, run)
    k = run / "rank-1.kineto.json.gz"  # cut in half: it pairs by its first bytes, then fails to read
    doc = gzip.decompress(k.read_bytes())
    k.write_bytes(gzip.compress(doc[: len(doc) // 2]))
    code, out, err = _convert(run, tmp_path / "et", 2)
    assert code == 2 and "rank-1.kineto.json.gz" in err, err
    assert [p.name for p in (tmp_path / "et").iterdir()] == []


def test_generated_4_ranks_equal_one_process(spawn, tmp_path):
    src = shared_trace("param/dlrm_8ranks_v100")
    run = tmp_path / "r4"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "make_many_ranks.py"), "4", str(run), "--source", str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    files = _same_as_one_process(run, tmp_path)
    assert len(files) == 5
