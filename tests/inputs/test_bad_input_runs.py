"""Runs that are not whole, and convert --force (issue 15, items 3 and 4): an incomplete run is
refused unless --allow-partial (then labelled); convert --force replaces and removes only the
rank files convert wrote, so the output's rank set is always one run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.et.writer import RUN_MARKER
from tests.bad_inputs import valid


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CHARLLM_TRACE_ALLOW_PARTIAL", raising=False)


def _cli(*args: str) -> object:
    return CliRunner().invoke(main, list(args))


def _one_rank_run(tmp_path: Path) -> Path:
    run = valid.run_dir(tmp_path)
    for p in run.glob("rank-0.*"):
        p.unlink()
    return run


def test_incomplete_run_is_refused_then_labelled_with_allow_partial(tmp_path: Path) -> None:
    run = _one_rank_run(tmp_path)
    r = _cli("analyze", str(run))
    assert r.exit_code == 2 and "rank(s) 0 of 0-1 have no trace" in r.stderr, r.stderr
    r = _cli("analyze", "--allow-partial", str(run), "--format", "json")
    assert r.exit_code == 0, r.output
    assert "partial run (--allow-partial)" in r.stderr and "rank(s) 1 only" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["ranks"] == [1]
    assert any("partial run (--allow-partial)" in n for ns in doc["notes"].values() for n in ns), doc["notes"]
    # the flag is per command: the next command without it refuses again (no cached pass)
    assert _cli("analyze", str(run)).exit_code == 2


def test_convert_allow_partial_writes_the_ranks_present(tmp_path: Path) -> None:
    run = _one_rank_run(tmp_path)
    assert _cli("convert", str(run), "-o", str(tmp_path / "ets")).exit_code == 2
    r = _cli("convert", "--allow-partial", str(run), "-o", str(tmp_path / "ets"))
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "ets").glob("rank-*")) == ["rank-1.et"]


def test_interrupted_run_is_read_with_its_note_every_time(tmp_path: Path) -> None:
    """Not refused though rank 0 is missing: the note says what happened and what is usable,
    once per command, also when the conversion or the results come from the cache (the note was
    lost on cache hits)."""
    run = _one_rank_run(tmp_path)
    man = json.loads((run / "manifest.json").read_text())
    man["status"] = "interrupted"
    (run / "manifest.json").write_text(json.dumps(man))
    for cmd in ("info", "info", "analyze", "analyze"):
        r = _cli(cmd, str(run))
        assert r.exit_code == 0, r.output
        notes = [ln for ln in r.stderr.splitlines() if "this run was interrupted" in ln]
        assert len(notes) == 1 and "usable: rank(s) 1" in notes[0], (cmd, r.stderr)


def _ets(tmp_path: Path, ranks: list[int], name: str = "ets") -> Path:
    from charllm_trace.core.model import Run
    from charllm_trace.et.writer import write_run
    from tests.helpers.et_traces import small_trace

    out = tmp_path / name
    write_run(Run(traces={r: small_trace(rank=r, world=len(ranks)) for r in ranks}), out)
    return out


def test_convert_force_with_fewer_ranks_leaves_no_stale_rank_file(tmp_path: Path) -> None:
    """Before: `convert -o D --force` of a 1-rank input into D holding rank-0..3 left rank-1..3,
    which `info D` then reported as one run."""
    out = _ets(tmp_path, [0, 1, 2, 3])
    k = valid.kineto(tmp_path)
    assert _cli("convert", str(k), "-o", str(out)).exit_code == 2  # no --force: nothing replaced
    r = _cli("convert", str(k), "-o", str(out), "--force")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.glob("rank-*")) == ["rank-0.et"]
    assert json.loads((out / RUN_MARKER).read_text())["files"] == ["rank-0.et"]
    assert _cli("info", str(out)).exit_code == 0


def test_convert_force_never_deletes_a_rank_file_it_did_not_write(tmp_path: Path) -> None:
    out = _ets(tmp_path, [0, 1])
    mine = out / "rank-7.et"
    mine.write_bytes((out / "rank-1.et").read_bytes())  # put there by the user, not by convert
    r = _cli("convert", str(valid.kineto(tmp_path)), "-o", str(out), "--force")
    assert r.exit_code == 2 and "rank-7.et" in r.stderr and "was not written by" in r.stderr, r.stderr
    assert mine.exists() and (out / "rank-1.et").exists()


def test_convert_into_a_directory_of_foreign_ets_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "rank-0.et").write_bytes(b"their work")
    r = _cli("convert", str(valid.kineto(tmp_path)), "-o", str(out), "--force")
    assert r.exit_code == 2 and "not written by charllm-trace convert" in r.stderr
    assert (out / "rank-0.et").read_bytes() == b"their work"


@pytest.mark.parametrize("case", ["no nodes", "null durations", "zero durations", "no start times"])
def test_odd_but_valid_ets_go_through_every_command(tmp_path: Path, case: str) -> None:
    """Valid ETs at the edges: every command gives a result (report on an ET of zero durations was
    an IndexError, exit 3)."""
    import polars as pl

    from charllm_trace.et.writer import write_et
    from tests.helpers.et_traces import small_trace

    t = small_trace()
    if case == "no nodes":
        t.nodes, t.deps = t.nodes.head(0), t.deps.head(0)
    else:
        col, value = {"null durations": ("dur_ns", None), "zero durations": ("dur_ns", 0), "no start times": ("start_ns", None)}[case]  # fmt: skip
        t.nodes = t.nodes.with_columns(pl.lit(value, dtype=pl.Int64).alias(col))
    p = tmp_path / "rank-0.et"
    write_et(t, p)
    for args in (
        ["info", str(p)],
        ["analyze", str(p)],
        ["analyze", "--simulate", str(p)],
        ["report", str(p), "-o", str(tmp_path / "r.html"), "--force"],
        ["export", "perfetto", str(p), "-o", str(tmp_path / "p.json"), "--force"],
    ):
        r = _cli(*args)
        assert r.exit_code == 0, (args, r.output, r.stderr)


def test_convert_of_a_chakra_et_says_it_is_already_one(tmp_path: Path) -> None:
    """Before: `convert x.et` said "not valid JSON ... surrogates not allowed" about a valid ET."""
    et = valid.et(tmp_path)
    r = _cli("convert", str(et), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert str(et) in r.stderr and "already a Chakra ET" in r.stderr
    r = _cli("convert", str(valid.kineto(tmp_path)), "--host-et", str(et), "-o", str(tmp_path / "out"))
    assert r.exit_code == 2 and "already a Chakra ET" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
