"""sanitize on untrusted input and outputs (issue 15 items 3 and 6): ``--force`` replaces only
what sanitize wrote, empty Chakra ET files are refused. Each case failed before its fix."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from charllm_trace.cli.app import main

FIX = Path(__file__).parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"


def _run(*args: str):
    return CliRunner().invoke(main, ["sanitize", *args])


def _small_run(root: Path) -> Path:
    """The fixture run without its ranks' Kineto profiles and host ETs (the ``.gz`` files): where a
    case is about sanitize's own outputs and the files it refuses, not about what it removes from
    traces (tests/sanitize/test_sanitize*.py), a small run tests the same for 0.1 s of CPU
    instead of 1.8 s a sanitize."""
    run = root / "small-run"
    shutil.copytree(FIX, run, ignore=shutil.ignore_patterns("*.gz"))
    return run


def test_force_never_deletes_a_foreign_directory(tmp_path: Path) -> None:
    thesis = tmp_path / "thesis"
    (thesis / "chapter1").mkdir(parents=True)
    (thesis / "thesis.tex").write_text("years of work")
    (thesis / "chapter1" / "intro.tex").write_text("more work")
    r = _run(str(FIX), "-o", str(thesis), "--force")
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and len(r.output.strip().splitlines()) == 1
    assert (thesis / "thesis.tex").read_text() == "years of work"
    assert (thesis / "chapter1" / "intro.tex").read_text() == "more work"
    # an empty foreign directory and a foreign file are not replaced either
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run(str(FIX), "-o", str(empty), "--force").exit_code == 2
    note = tmp_path / "notes.txt"
    note.write_text("mine")
    assert _run(str(FIX), "-o", str(note), "--force").exit_code == 2
    assert note.read_text() == "mine"


def test_force_replaces_its_own_output(tmp_path: Path) -> None:
    src = _small_run(tmp_path)
    out = tmp_path / "clean"
    assert _run(str(src), "-o", str(out)).exit_code == 0
    (out / "stale.json").write_text("{}")
    r = _run(str(src), "-o", str(out), "--force")
    assert r.exit_code == 0, r.output
    assert not (out / "stale.json").exists() and (out / "manifest.json").is_file()
    # sanitizing the sanitized copy does not copy the marker as data
    again = tmp_path / "again"
    r = _run(str(out), "-o", str(again))
    assert r.exit_code == 0, r.output
    assert "left out" not in r.output
    # a single file: --force replaces a file of the same kind it may have written, not a directory
    one = tmp_path / "one.json"
    assert _run(str(FIX / "rank-0.info.json"), "-o", str(one)).exit_code == 0
    assert _run(str(FIX / "rank-0.info.json"), "-o", str(one), "--force").exit_code == 0
    assert _run(str(FIX / "rank-0.info.json"), "-o", str(tmp_path / "again"), "--force").exit_code == 2


def test_empty_chakra_et_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIX, run)
    (run / "rank-0.et").write_bytes(b"")
    r = _run(str(run), "-o", str(tmp_path / "o"))
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and "rank-0.et" in r.output and "empty" in r.output
    assert not (tmp_path / "o").exists()
    r = _run(str(run / "rank-0.et"), "-o", str(tmp_path / "o.et"))
    assert r.exit_code == 2 and "empty" in r.output


def test_special_files_are_never_opened(tmp_path: Path) -> None:
    """A FIFO in a run is left out and named (reading it would block); a FIFO as the input is refused."""
    import os

    run = _small_run(tmp_path)
    os.mkfifo(run / "rank-2.kineto.json")
    r = _run(str(run), "-o", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert "left out" in r.output and "rank-2.kineto.json" in r.output
    assert not (tmp_path / "o" / "rank-2.kineto.json").exists()
    r = _run(str(run / "rank-2.kineto.json"), "-o", str(tmp_path / "x.json"))
    assert r.exit_code == 2 and r.output.startswith("error: ") and "FIFO" in r.output


def test_gzip_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    """A small ``.et.gz`` of zeros is refused at a bounded size, and a ``.json.gz`` whose
    decompressed start is not JSON is refused from its first bytes (not after expanding whole)."""
    import gzip
    import resource

    run = tmp_path / "run"
    shutil.copytree(FIX, run)
    bomb = run / "rank-0.et.gz"
    # 1 GiB of zeros, about 1 MB compressed: 64 gzip members of 16 MiB each (a reader that stops
    # after the first member would see 16 MiB, under the limit, and the test would fail)
    bomb.write_bytes(gzip.compress(bytes(16 << 20), compresslevel=9) * 64)
    assert bomb.stat().st_size < 2 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = _run(str(run), "-o", str(tmp_path / "o"))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and "gzip bomb" in r.output and "rank-0.et.gz" in r.output
    assert grown_mb < 700  # the limit (256 MiB here) bounds what was held, not the 1 GiB
    bomb.unlink()
    (run / "rank-0.kineto.json.gz").write_bytes(gzip.compress(b"\0" * (8 << 20)))
    r = _run(str(run), "-o", str(tmp_path / "o"))
    assert r.exit_code == 2 and "not JSON" in r.output and "rank-0.kineto.json.gz" in r.output


def test_deeply_nested_json_is_a_one_line_error(tmp_path: Path) -> None:
    """1,000 nested arrays (within orjson's limit, past Python's recursion limit): exit 2, not 3."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text('{"a":' + "[" * 1000 + "]" * 1000 + "}")
    r = _run(str(run), "-o", str(tmp_path / "o"))
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and "nested too deeply" in r.output
    assert len(r.output.strip().splitlines()) == 1
    (run / "manifest.json").write_text('{"a":' + "[" * 300 + "]" * 300 + "}")  # past orjson's writing limit
    r = _run(str(run), "-o", str(tmp_path / "o"))
    assert r.exit_code == 2 and r.output.startswith("error: ") and "manifest.json" in r.output, r.output


def test_unwritable_output_places_are_one_line_errors(tmp_path: Path) -> None:
    """An output under a file, or where no directory can be made: exit 2 before any input is read."""
    afile = tmp_path / "afile.json"
    afile.write_text("{}")
    for out in (afile / "x", afile / "deeper" / "x"):
        r = _run(str(FIX), "-o", str(out))
        assert r.exit_code == 2, r.output
        assert r.output.startswith("error: ") and "not a directory" in r.output
        assert len(r.output.strip().splitlines()) == 1
    r = _run(str(FIX), "-o", "/proc/charllm-sanitize-test")
    assert r.exit_code == 2 and r.output.startswith("error: ") and "cannot write here" in r.output, r.output


def test_table_pid_columns_are_remapped(tmp_path: Path) -> None:
    """Parquet/Arrow tables: integer pid/tid columns get the run's id pseudonyms (same as the JSON)."""
    import json

    import polars as pl

    from charllm_trace.sanitize.rules import ID_BASE

    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"launcher": {"pid": 31337}}))
    pl.DataFrame({"pid": [31337, 4711, None], "tid": [31338, 31338, 5], "x": [1, 2, 3]}).write_parquet(
        run / "events.parquet"
    )
    assert _run(str(run), "-o", str(tmp_path / "o")).exit_code == 0
    df = pl.read_parquet(tmp_path / "o" / "events.parquet")
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert df["pid"][0] == man["launcher"]["pid"] >= ID_BASE
    assert df["pid"][1] >= ID_BASE and df["pid"][2] is None
    assert df["tid"].to_list()[2] == 5 and df["tid"][0] == df["tid"][1] >= ID_BASE  # below 100: kept
    assert df["x"].to_list() == [1, 2, 3]
