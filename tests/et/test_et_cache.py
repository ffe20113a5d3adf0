"""The decoded-ET cache: hits give the same trace, changes miss, a broken cache is only a miss."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.core.model import DEP_SCHEMA
from charllm_trace.et import cache as et_cache
from charllm_trace.et import reader
from charllm_trace.et.reader import read_et
from charllm_trace.et.writer import write_et
from tests.conftest import shared_trace
from tests.helpers.et_traces import small_trace


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(d))
    return d


def _no_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a, **k):
        raise AssertionError("decoded although the cache should have hit")

    monkeypatch.setattr(reader, "decode_et", boom)


def test_cached_reload_is_identical(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    p = tmp_path / "trace.0.et"
    shutil.copy(src, p)
    cold = read_et(p)
    entries = [e for e in (cache_dir / "et").iterdir() if not e.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "nodes.bin").is_file()
    assert not any(
        x.name.endswith((".bin", ".json")) for x in tmp_path.iterdir()
    )  # nothing beside the user's file
    _no_decode(monkeypatch)
    warm = read_et(p)
    assert warm.equals(cold)
    assert warm.meta.has_timestamps is False
    # the enum column comes back as the model's enum (stored as its codes)
    assert warm.deps.schema == pl.Schema(DEP_SCHEMA)
    assert warm.deps["kind"].to_list() == cold.deps["kind"].to_list()
    assert (
        warm.deps.filter(pl.col("kind") == "data").height
        == cold.deps.filter(pl.col("kind") == "data").height
        > 0
    )


def test_changed_file_misses(tmp_path: Path, cache_dir: Path) -> None:
    p = tmp_path / "rank-0.et"
    write_et(small_trace(0), p)
    assert read_et(p).meta.rank == 0
    write_et(small_trace(1), p, overwrite=True)
    assert read_et(p).equals(small_trace(1))


def test_copy_shares_the_content_entry(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "rank-0.et"
    write_et(small_trace(0), p)
    read_et(p)
    q = tmp_path / "copy.et"
    shutil.copy(p, q)
    assert read_et(q).equals(small_trace(0))
    assert len([e for e in (cache_dir / "et").iterdir() if not e.name.startswith(".")]) == 1


def test_broken_cache_entry_is_a_miss(tmp_path: Path, cache_dir: Path) -> None:
    p = tmp_path / "rank-0.et"
    write_et(small_trace(0), p)
    read_et(p)
    (entry,) = [e for e in (cache_dir / "et").iterdir() if not e.name.startswith(".")]
    (entry / "nodes.json").write_bytes(b"garbage")
    assert et_cache.lookup(p) is None
    assert read_et(p).equals(small_trace(0))


def test_no_cache_writes_nothing(tmp_path: Path, cache_dir: Path) -> None:
    p = tmp_path / "rank-0.et"
    write_et(small_trace(0), p)
    read_et(p, cache=False)
    assert not (cache_dir / "et").exists()
