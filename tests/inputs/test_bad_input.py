"""Bad input through the CLI: one stderr line naming the file and the problem, exit 2, no traceback."""

from __future__ import annotations

import gzip
import os
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.core.model import Run
from charllm_trace.et import _native
from charllm_trace.et.writer import write_et, write_run
from tests.conftest import shared_trace
from tests.helpers.et_traces import small_trace
from tests.helpers.fuzz_budget import examples


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def decoder(et_decoder: str) -> str:
    """The test runs with the C scanner and with the pure numpy decoder (conftest.et_decoder)."""
    return et_decoder


def bad(path: Path, *needles: str, cmd: str = "info") -> str:
    """Run ``charllm-trace <cmd> path``; check the one-line error and return it."""
    r = CliRunner().invoke(main, [cmd, str(path)])
    assert r.exit_code == 2, (r.exit_code, r.output, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    assert "Traceback" not in r.output and "Traceback" not in r.stderr
    for n in needles:
        assert n in line, (n, line)
    return line


def good_et(tmp_path: Path, name: str = "rank-0.et") -> Path:
    p = tmp_path / name
    write_et(small_trace(), p)
    return p


def test_missing_path(tmp_path: Path) -> None:
    bad(tmp_path / "nope.et", "nope.et", "no such file or directory")


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    bad(tmp_path / "empty", "empty", "directory is empty")


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.et"
    p.write_bytes(b"")
    bad(p, "rank-0.et", "file is empty")


def test_truncated_et(tmp_path: Path, decoder: str) -> None:
    p = good_et(tmp_path)
    data = p.read_bytes()
    p.write_bytes(data[:-7])
    bad(p, "rank-0.et", "truncated")


def test_length_varint_past_eof(tmp_path: Path, decoder: str) -> None:
    p = good_et(tmp_path)
    p.write_bytes(p.read_bytes() + b"\x80")
    bad(p, "rank-0.et", "truncated", "runs past the end of the file")


def test_truncated_gzip(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.et.gz"
    write_et(small_trace(), p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    bad(p, "rank-0.et.gz", "gzip stream is truncated")


def test_random_bytes(tmp_path: Path, decoder: str) -> None:
    p = tmp_path / "rank-0.et"
    p.write_bytes(random.Random(1234).randbytes(4096))
    line = bad(p, "rank-0.et")
    assert any(w in line for w in ("not a Chakra ET", "truncated", "corrupt")), line


def test_node_that_fails_to_parse(tmp_path: Path, decoder: str) -> None:
    """Framing is fine, but a Node message holds an invalid field tag (wire type 7)."""
    p = good_et(tmp_path)
    data = p.read_bytes()
    node = b"\x08\x05\x0f\x01"  # id=5, then a tag with wire type 7
    p.write_bytes(data + bytes([len(node)]) + node)
    bad(p, "rank-0.et", "corrupt", "message 5")


def test_invalid_utf8_name(tmp_path: Path, decoder: str) -> None:
    p = good_et(tmp_path)
    node = b"\x08\x07\x12\x02\xff\xfe"  # id=7, name = two bytes that are not UTF-8
    p.write_bytes(p.read_bytes() + bytes([len(node)]) + node)
    bad(p, "rank-0.et", "UTF-8")


def test_json_named_et(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.et"
    p.write_text('{"schemaVersion": 1, "traceEvents": []}\n')
    bad(p, "rank-0.et", "JSON")


def test_json_gz_named_et(tmp_path: Path) -> None:
    p = tmp_path / "trace.et.gz"
    p.write_bytes(gzip.compress(b'[{"ph": "X"}]'))
    bad(p, "trace.et.gz", "JSON")


def _two_runs(tmp_path: Path, a: Run, b: Run) -> Path:
    d = tmp_path / "mixed"
    write_run(a, tmp_path / "a")
    write_run(b, tmp_path / "b")
    d.mkdir()
    shutil.copy(tmp_path / "a" / "rank-0.et", d / "rank-0.et")
    shutil.copy(tmp_path / "b" / "rank-1.et", d / "rank-1.et")
    return d


def test_directory_mixing_world_sizes(tmp_path: Path) -> None:
    a = Run(traces={0: small_trace(0, world=2), 1: small_trace(1, world=2)})
    b = Run(traces={0: small_trace(0, world=4), 1: small_trace(1, world=4)})
    d = _two_runs(tmp_path, a, b)
    bad(d, "rank-1.et", "mixes two runs", "world size 4", "rank-0.et")


def test_directory_mixing_run_ids(tmp_path: Path) -> None:
    a = Run(traces={0: small_trace(0), 1: small_trace(1)}, manifest={"run_id": "run-a"})
    b = Run(traces={0: small_trace(0), 1: small_trace(1)}, manifest={"run_id": "run-b"})
    d = _two_runs(tmp_path, a, b)
    bad(d, "rank-1.et", "mixes two runs", "run-b", "run-a")


def test_directory_with_duplicate_rank(tmp_path: Path) -> None:
    d = tmp_path / "dup"
    d.mkdir()
    write_et(small_trace(0), d / "rank-0.et")
    write_et(small_trace(0), d / "rank-0-again.et")
    bad(d, "mixes two runs", "rank 0 again")


def test_directory_of_foreign_ets_without_rank_names(tmp_path: Path) -> None:
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    d = tmp_path / "foreign"
    d.mkdir()
    shutil.copy(src, d / "alpha.et")
    bad(d, "alpha.et", "cannot tell its rank")


def test_foreign_ranks_from_file_names(tmp_path: Path) -> None:
    """Chakra's converter names files <name>.<rank>.et and writes no rank: we take it from the name."""
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    d = tmp_path / "foreign"
    d.mkdir()
    shutil.copy(src, d / "trace.0.et")
    shutil.copy(src, d / "trace.1.et")
    from charllm_trace.inputs.loader import load

    run = load(d, cache=False)
    assert run.ranks == [0, 1]
    assert run.traces[1].meta.extra["rank_from"] == "file name"


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_traceback(tmp_path: Path, where: str) -> None:
    """``--debug`` before the subcommand or after it (issue 27: ``info --debug`` was "No such option")."""
    p = tmp_path / "rank-0.et"
    p.write_bytes(b"")
    args = ["--debug", "info", str(p)] if where == "before" else ["info", str(p), "--debug"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2
    assert "Traceback" in r.stderr and "InputError" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: ")
    quiet = CliRunner().invoke(main, ["info", str(p)])
    assert quiet.exit_code == 2 and "Traceback" not in quiet.stderr


def test_mutated_ets_decode_or_fail_cleanly(tmp_path: Path) -> None:
    """Flipped bytes, cut files and spliced garbage: every decoder either returns a Trace or raises
    InputError (never another exception, never a crash of the process)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from charllm_trace.core.errors import InputError
    from charllm_trace.et.reader import read_et

    good = tmp_path / "good.et"
    write_et(small_trace(), good)
    data = good.read_bytes()

    @settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        flips=st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)), max_size=4),
        cut=st.integers(1, len(data)),
        junk=st.binary(max_size=16),
    )
    def check(flips: list[tuple[int, int]], cut: int, junk: bytes) -> None:
        b = bytearray(data)
        for i, v in flips:
            b[i] = v
        for blob in (bytes(b), bytes(b[:cut]) + junk):
            p = tmp_path / "m.et"
            p.write_bytes(blob)
            got = []
            for native in ("1", "0"):
                os.environ["CHARLLM_TRACE_NATIVE"] = native
                _native.reset()
                try:
                    got.append(read_et(p, cache=False))
                except InputError as exc:
                    got.append(exc.problem)
            # the C scanner and the numpy decoder agree on what they accept, and on the result
            assert isinstance(got[0], str) == isinstance(got[1], str)
            if not isinstance(got[0], str):
                assert got[0].equals(got[1])

    try:
        check()
    finally:
        os.environ.pop("CHARLLM_TRACE_NATIVE", None)
        _native.reset()


def test_debug_is_not_taken_from_collects_program() -> None:
    """``collect``'s arguments after its options are the user's program: a ``--debug`` there is
    the program's; elsewhere it is ours, before or after the subcommand (issue 27)."""
    from charllm_trace.core.errors import debug_first

    commands = main.commands  # type: ignore[attr-defined]
    prog = ["collect", "--run-dir", "r", "python", "train.py", "--debug"]
    assert debug_first(prog, commands) == prog
    assert debug_first(["--debug", "collect", "python", "t.py"], commands) == [
        "--debug",
        "collect",
        "python",
        "t.py",
    ]
    assert debug_first(["analyze", "RUN", "--debug"], commands) == ["--debug", "analyze", "RUN"]
    assert debug_first(["analyze", "RUN", "--", "--debug"], commands) == ["analyze", "RUN", "--", "--debug"]
