"""The results cache (issue 12 item 3): a second ``analyze``/``report`` of the same input with the
same options prints the stored results without loading the trace, byte-identical to the first;
damaged entries are deleted with one note and rebuilt; --no-cache, cache info/clear and the
size cap cover the entries; the hit imports none of the analyses, converters or numpy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import charllm_trace.inputs.loader
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.cli.app import main
from charllm_trace.store import results_cache
from tests.conftest import FIXTURES, shared_trace

GLOO = FIXTURES / "cpu-2rank-gloo"
KINETO = GLOO / "rank-0.kineto.json.gz"


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def _entries(cache_dir: Path) -> list[Path]:
    d = cache_dir / "results"
    return sorted(p for p in d.iterdir() if not p.name.startswith(".")) if d.is_dir() else []


@pytest.fixture
def no_load(monkeypatch: pytest.MonkeyPatch):
    """Makes loading any trace fail: a hit must not need the trace."""

    def forbid() -> None:
        def boom(*_a, **_k):
            raise AssertionError("the trace was loaded on a cache hit")

        monkeypatch.setattr(charllm_trace.inputs.loader, "load", boom)

    return forbid


def _inputs(gloo_ets: Path) -> dict[str, Path]:
    return {
        "run directory": GLOO,
        "Kineto file": KINETO,
        "ET directory": gloo_ets,
        "ET file": next(gloo_ets.glob("*.et")),
    }


@pytest.mark.parametrize("kind", ["run directory", "Kineto file", "ET directory", "ET file"])
@pytest.mark.parametrize("fmt", ["json", "table"])
def test_hit_prints_the_same_without_loading(
    kind: str, fmt: str, gloo_ets: Path, cache_dir: Path, no_load, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(_inputs(gloo_ets)[kind])
    args = ["analyze", path, "--format", fmt, "--per-step"]
    code, fresh, _ = cli(*args, "--no-cache")
    assert code == 0 and not _entries(cache_dir)
    code, first, _ = cli(*args)
    assert code == 0 and first == fresh and len(_entries(cache_dir)) == 1
    no_load()
    code, second, err = cli(*args)
    assert code == 0, err
    assert second == fresh


def test_what_if_hit(cache_dir: Path, no_load) -> None:
    args = ["analyze", str(GLOO), "--format", "json", "--what-if", "comm=0.5,launch=0"]
    _, fresh, _ = cli(*args, "--no-cache")
    assert cli(*args)[1] == fresh
    no_load()
    code, hit, _ = cli(*args)
    assert code == 0 and hit == fresh and '"predicted": true' in hit


def test_report_hit(cache_dir: Path, tmp_path: Path, no_load) -> None:
    h1, h2, h0 = tmp_path / "1.html", tmp_path / "2.html", tmp_path / "0.html"
    assert cli("report", str(GLOO), "-o", str(h0), "--no-cache")[0] == 0
    assert cli("report", str(GLOO), "-o", str(h1))[0] == 0
    no_load()
    assert cli("report", str(GLOO), "-o", str(h2))[0] == 0
    assert h0.read_bytes() == h1.read_bytes() == h2.read_bytes()


def test_save_from_an_entry_without_views(cache_dir: Path, tmp_path: Path) -> None:
    """analyze stores no report views; --save needs them: the input is analysed again, the entry
    replaced by one with views, and the saved file draws the same report."""
    assert cli("analyze", str(GLOO), "--format", "json")[0] == 0
    (entry,) = _entries(cache_dir)
    small = entry.stat().st_size
    saved = tmp_path / "r.zip"
    code, out, err = cli("analyze", str(GLOO), "--format", "json", "--save", str(saved))
    assert code == 0, err
    (entry,) = _entries(cache_dir)
    assert entry.stat().st_size > small
    assert cli("report", str(saved), "-o", str(tmp_path / "a.html"))[0] == 0


def test_keys_separate_options_ranks_inputs_and_code(
    cache_dir: Path, gloo_ets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = results_cache.results_key(GLOO, AnalyzeOptions())
    assert results_cache.results_key(GLOO, AnalyzeOptions()) == base
    others = {
        results_cache.results_key(GLOO, AnalyzeOptions(per_step=True)),
        results_cache.results_key(GLOO, AnalyzeOptions(critical_path=False)),
        results_cache.results_key(GLOO, AnalyzeOptions(what_if={"comm": 0.5})),
        results_cache.results_key(GLOO, AnalyzeOptions(), [0]),
        results_cache.results_key(gloo_ets, AnalyzeOptions()),
        results_cache.results_key(KINETO, AnalyzeOptions()),
    }
    assert base not in others and len(others) == 6
    monkeypatch.setattr(results_cache, "code_fingerprint", lambda: "other code")
    assert results_cache.results_key(GLOO, AnalyzeOptions()) != base


def test_a_changed_input_misses(cache_dir: Path, tmp_path: Path) -> None:
    f = tmp_path / "k.json.gz"
    shutil.copy(KINETO, f)
    code, first, _ = cli("analyze", str(f), "--format", "json")
    other = FIXTURES / "cpu-2rank-gloo" / "rank-1.kineto.json.gz"
    shutil.copy(other, f)  # same name, other content
    code, second, _ = cli("analyze", str(f), "--format", "json")
    _, fresh, _ = cli("analyze", str(f), "--format", "json", "--no-cache")
    assert code == 0 and second == fresh and second != first
    assert len(_entries(cache_dir)) == 2


def test_a_copy_elsewhere_hits_and_names_the_copy(cache_dir: Path, tmp_path: Path, no_load) -> None:
    copy = tmp_path / "elsewhere" / "copy.json.gz"
    copy.parent.mkdir()
    shutil.copy(KINETO, copy)
    assert cli("analyze", str(KINETO), "--format", "json")[0] == 0
    _, fresh, _ = cli("analyze", str(copy), "--format", "json", "--no-cache")
    no_load()
    code, hit, _ = cli("analyze", str(copy), "--format", "json")
    assert code == 0 and hit == fresh and json.loads(hit)["source"] == str(copy)
    assert len(_entries(cache_dir)) == 1


def test_bad_ranks_are_not_cached(cache_dir: Path) -> None:
    code, _, err = cli("analyze", str(GLOO), "--ranks", "7")
    assert code == 2 and "no rank [7]" in err and not _entries(cache_dir)
    assert cli("analyze", str(GLOO), "--ranks", "1", "--format", "json")[0] == 0
    assert len(_entries(cache_dir)) == 1


def test_no_cache_writes_nothing_and_clear_removes_entries(cache_dir: Path) -> None:
    assert cli("analyze", str(GLOO), "--no-cache")[0] == 0
    assert not cache_dir.exists()
    assert cli("analyze", str(GLOO))[0] == 0
    assert len(_entries(cache_dir)) == 1
    code, out, _ = cli("cache", "info")
    assert code == 0 and "results" in out
    code, out, _ = cli("cache", "clear")
    assert code == 0 and not _entries(cache_dir)


def test_results_entries_are_pruned_with_the_rest(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli("analyze", str(GLOO), "--format", "json")[0] == 0
    (old,) = _entries(cache_dir)
    os.utime(old, (1_000_000, 1_000_000))  # least recently used of all
    size = old.stat().st_size
    total = sum(f.stat().st_size for f in cache_dir.rglob("*") if f.is_file())
    # a cap that the next results entry crosses: the oldest entry (the first results) goes first
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_MAX_GB", str((total + size / 2) / 1e9))
    assert cli("analyze", str(GLOO), "--format", "json", "--per-step")[0] == 0
    assert not old.exists() and len(_entries(cache_dir)) == 1


# --- damaged entries, in fresh processes (as a user meets them) ---------------------


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "charllm_trace.cli.app", *args], capture_output=True, text=True, env=env
    )


def _damage(entry: Path, how: str) -> None:
    data = entry.read_bytes()
    if how == "truncate":
        entry.write_bytes(data[: len(data) // 3])
    elif how == "flip":
        b = bytearray(data)
        for at in range(len(b) // 4, len(b) - 100, len(b) // 7):
            b[at] ^= 0xFF
        entry.write_bytes(bytes(b))
    elif how == "empty":
        entry.write_bytes(b"")
    elif how == "foreign":
        entry.write_text('{"not": "ours"}')


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_damaged_entry_deleted_noted_and_rebuilt(spawn, how: str, cache_dir: Path) -> None:
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache_dir)}
    env.pop("CHARLLM_TRACE_NO_CACHE", None)
    args = ("analyze", str(KINETO), "--format", "json", "--no-critical-path")
    first = _run(*args, env=env)
    assert first.returncode == 0, first.stderr
    (entry,) = _entries(cache_dir)
    _damage(entry, how)
    shutil.rmtree(cache_dir / "outputs")  # the printed-output cache would answer first
    again = _run(*args, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    notes = [ln for ln in again.stderr.splitlines() if "cached results" in ln]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "deleted, analysing again" in notes[0]
    assert KINETO.name in notes[0] or str(KINETO) in notes[0]
    (rebuilt,) = _entries(cache_dir)
    clean = _run(*args, env=env)
    assert clean.stdout == first.stdout and "cached results" not in clean.stderr
    head, _, payload = rebuilt.read_bytes().partition(b"\n")
    assert (
        head.startswith(b"charllm-trace cas ") and payload[:4] == b"PK\x03\x04"
    )  # the store's head, a results file


@pytest.mark.parametrize("how", ["empty", "foreign"])
def test_a_file_without_our_marker_is_left_alone(spawn, how: str, cache_dir: Path) -> None:
    """An entry's name alone does not make it ours (issue 28): a file without the saved-results
    header is neither deleted nor replaced; the input is analysed again, with a note."""
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache_dir)}
    env.pop("CHARLLM_TRACE_NO_CACHE", None)
    args = ("analyze", str(KINETO), "--format", "json", "--no-critical-path")
    first = _run(*args, env=env)
    (entry,) = _entries(cache_dir)
    _damage(entry, how)
    shutil.rmtree(cache_dir / "outputs")  # the printed-output cache would answer first
    kept = entry.read_bytes()
    again = _run(*args, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    notes = [ln for ln in again.stderr.splitlines() if "not a cache entry of charllm-trace" in ln]
    assert len(notes) == 1 and "left alone" in notes[0], again.stderr
    assert entry.read_bytes() == kept


_PROBE = """
import sys
from charllm_trace.cli.app import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    heavy = sorted(m for m in sys.modules if m in ("numpy", "polars") or m.startswith((
        "charllm_trace.graph", "charllm_trace.converters", "charllm_trace.et.reader",
        "charllm_trace.et._colcache", "charllm_trace.analysis.api", "charllm_trace.analysis.overlap",
        "charllm_trace.analysis.bandwidth", "charllm_trace.analysis.critical", "charllm_trace.render.report")))
    print("HEAVY", ",".join(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize("fmt", ["json", "table", "csv"])
def test_hit_imports_no_analysis(spawn, fmt: str, cache_dir: Path) -> None:
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache_dir)}
    env.pop("CHARLLM_TRACE_NO_CACHE", None)
    path = str(shared_trace("hta/a100_ddp_nccl_rank0.json.gz"))
    args = ["analyze", path, "--format", fmt]
    miss = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env)
    assert miss.returncode == 0, miss.stderr
    assert "charllm_trace.graph" in miss.stderr  # the probe sees them when they are used
    hit = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env)
    assert hit.returncode == 0, hit.stderr
    assert hit.stdout == miss.stdout
    # JSON and tables to stdout come from the printed-output cache (store/output_cache.py): not even
    # polars; CSV from the results cache (polars, none of the analyses)
    assert ("HEAVY polars\n" if fmt == "csv" else "HEAVY \n") in hit.stderr, hit.stderr
