"""The cache of converted Kineto profiles and run directories: hits give the same trace, changes
miss, and a corrupt entry is detected, noted once, deleted and rebuilt, never trusted."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from charllm_trace.converters import run_dir
from charllm_trace.core.cas import DIR_MARK, MARK_FILE
from charllm_trace.et import cache as et_cache
from charllm_trace.inputs import loader
from tests.conftest import shared_trace

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_RUN = ROOT / "tests/fixtures/traces/cpu-2rank-gloo"
FIXTURE = FIXTURE_RUN / "rank-0.kineto.json.gz"


def _no_convert(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("converted although the cache should have hit")

    monkeypatch.setattr(run_dir, "convert_file", boom)
    monkeypatch.setattr(run_dir, "convert_run", boom)


def _entries(cache_dir: Path, kind: str) -> list[Path]:
    d = cache_dir / kind
    return sorted(e for e in d.iterdir() if not e.name.startswith(".")) if d.is_dir() else []


def _hit_equals_uncached(src: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = loader.load(src, cache=False)
    assert not _entries(cache_dir, "kineto")
    first = loader.load(src)  # converts and stores
    assert len(_entries(cache_dir, "kineto")) == 1
    _no_convert(monkeypatch)
    warm = loader.load(src)
    assert warm.ranks == cold.ranks
    for r in cold.ranks:
        assert first.traces[r].equals(cold.traces[r])
        assert warm.traces[r].equals(cold.traces[r])
    assert warm.source == str(src)


def test_small_kineto_profile_hits(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hit_equals_uncached(FIXTURE, cache_dir, monkeypatch)


def test_shared_a100_profile_hits(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hit_equals_uncached(shared_trace("hta/a100_ddp_nccl_rank0.json.gz"), cache_dir, monkeypatch)


def test_same_size_change_misses(tmp_path: Path, cache_dir: Path) -> None:
    p = tmp_path / "rank-0.kineto.json"
    text = gzip.decompress(FIXTURE.read_bytes())
    p.write_bytes(text)
    before = loader.load(p)
    st = p.stat()
    at = text.index(b'"dur": ') + len(b'"dur": ')
    digit = text[at : at + 1]
    assert digit.isdigit()
    changed = text[:at] + (b"1" if digit != b"1" else b"2") + text[at + 1 :]
    p.write_bytes(changed)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same modification time
    after = loader.load(p)
    assert after.traces[0].equals(loader.load(p, cache=False).traces[0])
    assert not after.traces[0].equals(before.traces[0])
    assert len(_entries(cache_dir, "kineto")) == 2


def test_copy_shares_the_entry(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = tmp_path / "a.json.gz"
    shutil.copy(FIXTURE, a)
    ref = loader.load(a)
    b = tmp_path / "b.json.gz"
    shutil.copy(FIXTURE, b)
    _no_convert(monkeypatch)
    assert loader.load(b).traces[0].equals(ref.traces[0])
    assert len(_entries(cache_dir, "kineto")) == 1


def test_run_directory_hits_and_misses_on_change(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, d)
    cold = loader.load(d, cache=False)
    loader.load(d)
    assert len(_entries(cache_dir, "run")) == 1
    with monkeypatch.context() as m:
        _no_convert(m)
        warm = loader.load(d)
    assert warm.ranks == cold.ranks and warm.manifest == cold.manifest
    for r in cold.ranks:
        assert warm.traces[r].equals(cold.traces[r])
    # any file of the run changes the key
    (d / "README.md").write_text("changed\n")
    loader.load(d)
    assert len(_entries(cache_dir, "run")) == 2


def test_no_cache_writes_nothing(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader.load(FIXTURE, cache=False)
    assert not cache_dir.exists()
    et_cache.set_enabled(False)
    loader.load(FIXTURE)
    assert not cache_dir.exists()
    et_cache.set_enabled(None)
    monkeypatch.setenv("CHARLLM_TRACE_NO_CACHE", "1")
    loader.load(FIXTURE)
    assert not cache_dir.exists()


def test_stale_temporaries_are_pruned(cache_dir: Path) -> None:
    loader.load(FIXTURE)
    old = cache_dir / "kineto" / ".0123456789abcdef-interrupted"
    old.mkdir()
    (old / MARK_FILE).write_bytes(DIR_MARK)  # what an interrupted store leaves: its marker is written first
    (old / "0.nodes.bin").write_bytes(b"x" * 100)
    past = time.time() - 2 * et_cache.STALE_S
    os.utime(old, (past, past))
    fresh = cache_dir / "kineto" / ".fedcba9876543210-running"
    fresh.mkdir()
    (fresh / MARK_FILE).write_bytes(DIR_MARK)
    foreign = cache_dir / "kineto" / "notes.txt"
    foreign.write_text("mine")
    draft = cache_dir / "kineto" / ".0123456789abcdef-draft"  # named like a temporary, not ours
    draft.mkdir()
    (draft / "data.txt").write_text("mine")
    os.utime(draft, (past, past))
    et_cache.prune()
    assert not old.exists()
    assert fresh.exists() and foreign.exists() and (draft / "data.txt").read_text() == "mine"


# ---------------------------------------------------------------------------
# corrupt entries: in a subprocess, so that a crash fails the test instead of pytest
# ---------------------------------------------------------------------------

_READ = """
import sys
from charllm_trace.inputs.loader import load
from charllm_trace.et.reader import read_et
p = sys.argv[1]
if p.endswith(".et"):
    a, b = read_et(p), read_et(p, cache=False)
else:
    a, b = load(p).traces[0], load(p, cache=False).traces[0]
print("equal" if a.equals(b) else "DIFFERENT", a.nodes.height)
"""


def _read(path: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHARLLM_TRACE_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    env.pop("CHARLLM_TRACE_NO_CACHE", None)
    return subprocess.run(
        [sys.executable, "-c", _READ, str(path)], capture_output=True, text=True, env=env, timeout=300
    )


def _reseal(path: Path, edit: bytes, to: bytes) -> None:
    """Edit a sealed description and write a valid checksum back (only the bounds check is left)."""
    body = path.read_bytes().rpartition(b"\n")[0]
    assert edit in body
    body = body.replace(edit, to, 1)
    path.write_bytes(body + b"\n" + f"{zlib.crc32(body):08x}".encode())


def _flip(path: Path) -> None:
    b = bytearray(path.read_bytes())
    for at in (len(b) // 3, len(b) // 2, len(b) - 1):
        b[at] ^= 0xA5
    path.write_bytes(bytes(b))


CORRUPTIONS = {
    "truncate nodes.bin": lambda e, p: (e / f"{p}nodes.bin").write_bytes(
        (e / f"{p}nodes.bin").read_bytes()[:999]
    ),
    "flip nodes.bin": lambda e, p: _flip(e / f"{p}nodes.bin"),
    "empty nodes.bin": lambda e, p: (e / f"{p}nodes.bin").write_bytes(b""),
    "truncate deps.bin": lambda e, p: (e / f"{p}deps.bin").write_bytes(
        (e / f"{p}deps.bin").read_bytes()[:64]
    ),
    "edit an offset": lambda e, p: (e / f"{p}nodes.json").write_bytes(
        (e / f"{p}nodes.json").read_bytes().replace(b'"buffers":[[', b'"buffers":[[4096', 1)
    ),
    "edit an offset, checksum redone": lambda e, p: _reseal(
        e / f"{p}nodes.json", b'"buffers":[null,[', b'"buffers":[null,[99999999'
    ),
    "empty description": lambda e, p: (e / f"{p}deps.json").write_bytes(b""),
    "flip meta.json": lambda e, p: _flip(e / "meta.json"),
    "empty meta.json": lambda e, p: (e / "meta.json").write_bytes(b""),
}


CASES = [("kineto", how) for how in CORRUPTIONS] + [
    ("et", how)
    for how in ("truncate nodes.bin", "flip nodes.bin", "empty nodes.bin", "edit an offset, checksum redone")
]


@pytest.mark.parametrize(("kind", "how"), CASES)
def test_corrupt_entry_is_noted_deleted_and_rebuilt(spawn, tmp_path: Path, kind: str, how: str) -> None:
    cache_dir = tmp_path / "cache"
    if kind == "kineto":
        src, prefix = tmp_path / "rank-0.kineto.json.gz", "0."
        shutil.copy(FIXTURE, src)
    else:
        from charllm_trace.et.writer import write_et

        src, prefix = tmp_path / "rank-0.et", ""
        write_et(loader.load(FIXTURE, cache=False).traces[0], src)
    first = _read(src, cache_dir)
    assert first.returncode == 0 and first.stdout.startswith("equal"), first.stderr
    assert "note:" not in first.stderr
    (entry,) = _entries(cache_dir, kind)
    CORRUPTIONS[how](entry, prefix)
    bad = _read(src, cache_dir)
    assert bad.returncode == 0, f"crashed ({bad.returncode}): {bad.stderr[-2000:]}"
    assert bad.stdout == first.stdout
    notes = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "corrupt" in notes[0], bad.stderr
    # rebuilt: the next read hits the new entry without a note
    again = _read(src, cache_dir)
    assert again.returncode == 0 and again.stdout == first.stdout and not again.stderr.strip()
    assert len(_entries(cache_dir, kind)) == 1
