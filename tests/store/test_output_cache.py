"""The printed-output cache (``charllm_trace/store/output_cache.py``): a repeated ``analyze`` (JSON
or a table) of an unchanged input with the same command line prints the first run's bytes without
loading the trace (and, as a whole process through ``cli/front.py``, without importing click,
polars or numpy); a changed input, another terminal for a table, other options, ``--no-cache``,
other formats and damaged or foreign entries are handled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import charllm_trace.inputs.loader
from charllm_trace.cli.app import main
from charllm_trace.store import output_cache
from tests.conftest import FIXTURES

GLOO = FIXTURES / "cpu-2rank-gloo"
KINETO = GLOO / "rank-0.kineto.json.gz"


def cli(*args: str) -> tuple[int, bytes, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout_bytes, r.stderr


def _outputs(cache_dir: Path) -> list[Path]:
    d = cache_dir / output_cache.KIND
    return sorted(p for p in d.iterdir() if not p.name.startswith(".")) if d.is_dir() else []


@pytest.fixture
def no_load(monkeypatch: pytest.MonkeyPatch):
    def forbid() -> None:
        def boom(*_a, **_k):
            raise AssertionError("the trace was loaded on an output-cache hit")

        monkeypatch.setattr(charllm_trace.inputs.loader, "load", boom)
        monkeypatch.setattr("charllm_trace.store.results_cache.lookup", boom)  # not even the results cache

    return forbid


@pytest.mark.parametrize("path", [KINETO, GLOO], ids=["Kineto file", "run directory"])
def test_hit_prints_the_first_runs_bytes(path: Path, cache_dir: Path, no_load) -> None:
    args = ["analyze", str(path), "--format", "json", "--per-step"]
    code, fresh, _ = cli(*args, "--no-cache")
    assert code == 0 and not _outputs(cache_dir)
    code, first, _ = cli(*args)
    assert code == 0 and first == fresh and len(_outputs(cache_dir)) == 1
    no_load()
    code, second, err = cli(*args)
    assert code == 0, err
    assert second == fresh


def test_other_options_or_a_changed_input_are_analysed(cache_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "t.json.gz"
    src.write_bytes(KINETO.read_bytes())
    base = ["analyze", str(src), "--format", "json"]
    assert cli(*base)[0] == 0
    assert cli(*base, "--no-critical-path")[0] == 0
    assert len(_outputs(cache_dir)) == 2  # one entry per option set
    other = (FIXTURES / "cpu-2rank-gloo" / "rank-1.kineto.json.gz").read_bytes()
    src.write_bytes(other)  # same name, other content: a new identity, analysed again
    os.utime(src, ns=(1, 1))
    code, out, _ = cli(*base)
    _, want, _ = cli(*base, "--no-cache")
    assert code == 0 and out == want
    assert len(_outputs(cache_dir)) == 2  # the same command line: its entry now holds the new output
    code, again, _ = cli(*base)
    assert code == 0 and again == want


@pytest.mark.parametrize(
    "extra",
    [["--format", "csv"], ["--format", "json", "-o", "OUT"], ["--no-cache", "--json"], ["--no-cache"]],
)
def test_only_json_or_a_table_to_stdout_with_the_cache_on_is_kept(
    extra: list[str], cache_dir: Path, tmp_path: Path
) -> None:
    args = [str(tmp_path / "o.json") if a == "OUT" else a for a in extra]
    code, _, err = cli("analyze", str(KINETO), *args)
    assert code == 0, err
    assert not _outputs(cache_dir)


@pytest.mark.parametrize("how", ["truncate", "flip", "empty"])
def test_a_damaged_entry_is_deleted_noted_and_rebuilt(how: str, cache_dir: Path) -> None:
    args = ["analyze", str(KINETO), "--format", "json", "--no-critical-path"]
    _, first, _ = cli(*args)
    (entry,) = _outputs(cache_dir)
    data = entry.read_bytes()
    if how == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif how == "flip":
        b = bytearray(data)
        b[len(b) // 2] ^= 0xFF
        entry.write_bytes(bytes(b))
    else:
        entry.write_bytes(b"")
    code, again, err = cli(*args)
    assert code == 0 and again == first
    if how != "empty":  # an empty file carries no head: not known to be ours, left alone
        assert "cached output" in err and "corrupt" in err, err
        assert entry.read_bytes() == data  # rebuilt
    else:
        assert entry.read_bytes() == b""


def test_a_foreign_file_under_an_entry_name_is_left_alone(cache_dir: Path) -> None:
    args = ["analyze", str(KINETO), "--format", "json", "--no-critical-path"]
    _, first, _ = cli(*args)
    (entry,) = _outputs(cache_dir)
    entry.write_text('{"not": "ours"}')
    code, again, _ = cli(*args)
    assert code == 0 and again == first
    assert entry.read_text() == '{"not": "ours"}'


def test_cache_info_and_clear_cover_the_outputs(cache_dir: Path) -> None:
    assert cli("analyze", str(KINETO), "--format", "json")[0] == 0
    code, out, _ = cli("cache", "info")
    line = next(ln for ln in out.decode().splitlines() if ln.strip().startswith("outputs"))
    assert line.split()[1] == "1"
    assert cli("cache", "clear")[0] == 0
    assert not _outputs(cache_dir)


def test_a_hit_as_a_process_prints_the_same_and_imports_no_polars(spawn, cache_dir: Path) -> None:
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache_dir)}
    env.pop("CHARLLM_TRACE_NO_CACHE", None)
    probe = (
        "import sys\nfrom charllm_trace.cli.app import main\n"
        "try:\n    main(sys.argv[1:], standalone_mode=False)\n"
        "finally:\n    print('HEAVY', sorted(m for m in ('polars', 'numpy', 'rich') if m in sys.modules), file=sys.stderr)\n"
    )
    args = ["analyze", str(GLOO), "--format", "json"]
    miss = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, env=env)
    hit = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, env=env)
    assert miss.returncode == 0 and hit.returncode == 0, hit.stderr
    assert b"HEAVY ['numpy', 'polars'" in miss.stderr
    assert hit.stdout == miss.stdout
    assert b"HEAVY []" in hit.stderr, hit.stderr


def test_a_table_is_kept_per_terminal(cache_dir: Path, monkeypatch: pytest.MonkeyPatch, no_load) -> None:
    """A table's layout follows the terminal: its entry holds for the terminal it was drawn on
    (width, colour variables); another terminal draws it again, byte-identical to --no-cache."""
    args = ["analyze", str(GLOO), "--per-step"]
    monkeypatch.setenv("COLUMNS", "100")
    code, fresh, _ = cli(*args, "--no-cache")
    assert code == 0 and not _outputs(cache_dir)
    code, first, _ = cli(*args)
    assert code == 0 and first == fresh and len(_outputs(cache_dir)) == 1
    monkeypatch.setenv("COLUMNS", "180")
    _, wide_fresh, _ = cli(*args, "--no-cache")
    assert wide_fresh != fresh  # the layout does follow the width
    code, wide, _ = cli(*args)
    assert code == 0 and wide == wide_fresh
    no_load()
    code, again, _ = cli(*args)
    assert code == 0 and again == wide_fresh


_FRONT_PROBE = (
    "import sys\nfrom charllm_trace.cli.front import main\nsys.argv[0] = 'charllm-trace'\n"
    "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
    "print('HEAVY', sorted(m for m in ('click', 'polars', 'numpy', 'rich') if m in sys.modules), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


@pytest.mark.parametrize(
    "fmt", [["--format", "json"], ["--format", "table"], []], ids=["json", "table", "default"]
)
def test_the_front_answers_a_hit_before_click(spawn, cache_dir: Path, fmt: list[str]) -> None:
    """``charllm-trace`` (cli/front.py) prints a stored output without importing click, polars,
    numpy or rich; the bytes (colour codes included, FORCE_COLOR) are those of an uncached run."""
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache_dir), "FORCE_COLOR": "1", "COLUMNS": "120"}
    env.pop("CHARLLM_TRACE_NO_CACHE", None)
    args = ["analyze", str(GLOO), *fmt]
    run = [sys.executable, "-c", _FRONT_PROBE]
    fresh = subprocess.run([*run, *args, "--no-cache"], capture_output=True, env=env)
    miss = subprocess.run([*run, *args], capture_output=True, env=env)
    hit = subprocess.run([*run, *args], capture_output=True, env=env)
    assert fresh.returncode == miss.returncode == hit.returncode == 0, hit.stderr
    assert b"'click'" in miss.stderr
    assert hit.stdout == miss.stdout == fresh.stdout
    assert b"HEAVY []" in hit.stderr, hit.stderr
    if fmt != ["--format", "json"]:
        assert b"\x1b[" in hit.stdout  # FORCE_COLOR: the table's colours are kept too


def test_the_front_with_a_damaged_entry_notes_it_once_and_analyses(spawn, cache_dir: Path) -> None:
    """A damaged entry met by the front: one note, the output of an uncached run, exit 0, no
    traceback; the entry is stored again and the next run is a clean hit."""
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache_dir)}
    env.pop("CHARLLM_TRACE_NO_CACHE", None)
    run = [
        sys.executable,
        "-m",
        "charllm_trace",
        "analyze",
        str(KINETO),
        "--format",
        "json",
        "--no-critical-path",
    ]
    first = subprocess.run(run, capture_output=True, env=env)
    assert first.returncode == 0, first.stderr
    (entry,) = _outputs(cache_dir)
    data = bytearray(entry.read_bytes())
    data[-10] ^= 0xFF
    entry.write_bytes(bytes(data))
    again = subprocess.run(run, capture_output=True, env=env)
    assert again.returncode == 0 and again.stdout == first.stdout
    notes = [ln for ln in again.stderr.decode().splitlines() if ln.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: the cached output") and "corrupt" in notes[0], notes
    clean = subprocess.run(run, capture_output=True, env=env)
    assert clean.returncode == 0 and clean.stdout == first.stdout and not clean.stderr
