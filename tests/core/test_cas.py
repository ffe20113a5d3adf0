"""The one content-addressed store (``charllm_trace/core/cas.py``): keys, the atomic write, the
checked read, the stat index, the ownership rule and the housekeeping every cache shares."""

from __future__ import annotations

import os
import threading
import time
import types
from pathlib import Path

import pytest

from charllm_trace.core import cas


def test_keys_cover_the_namespace_the_format_and_every_part(cache_dir: Path) -> None:
    k = cas.key(cas.RESULTS, "a", "b")
    assert len(k) == 64 and k == cas.key(cas.RESULTS, "a", "b")
    assert k != cas.key(cas.COMPARE, "a", "b")  # another namespace
    assert k != cas.key(cas.RESULTS, "a", "c") != cas.key(cas.RESULTS, "ab")
    assert cas.key(cas.RESULTS, 7) == cas.key(cas.RESULTS, "7")


def test_a_file_entry_round_trips_and_every_damage_is_caught(cache_dir: Path) -> None:
    cas.write(cas.COMPARE, "ab" * 32, b'{"x": 1}')
    entry = cas.COMPARE.path("ab" * 32)
    assert entry.read_bytes().startswith(cas.FILE_HEAD + b"7 compare ")
    assert cas.read(cas.COMPARE, "ab" * 32) == b'{"x": 1}'
    assert cas.read(cas.COMPARE, "cd" * 32) is None  # not stored
    good = entry.read_bytes()
    for bad in (good[:-1], good.replace(b'"x"', b'"y"'), good.replace(b"compare", b"outputs"), b""):
        entry.write_bytes(bad)
        with pytest.raises(cas.Corrupt):
            cas.read(cas.COMPARE, "ab" * 32)


def test_an_entry_of_an_earlier_format_is_never_read_but_is_cleared(cache_dir: Path) -> None:
    """Format 6 wrote index records as a head and the key, results as bare zips: the store never
    reads them as entries (another format), and ``clear`` still recognises them as its own."""
    old_index = cas.FILE_INDEX.path("ef" * 32)
    old_index.parent.mkdir(parents=True)
    old_index.write_text("charllm-trace cache index\n" + "01" * 32)
    assert cas.read_index(cas.FILE_INDEX, "ef" * 32) is None
    old_results = cas.RESULTS.path("ef" * 32)
    old_results.parent.mkdir(parents=True)
    old_results.write_bytes(b"PK\x03\x04" + b"\0" * 26 + b"charllm-results.json" + b"\0" * 10)
    with pytest.raises(cas.Corrupt):
        cas.read(cas.RESULTS, "ef" * 32)
    assert cas.owned(old_index, "file-index") and cas.owned(old_results, "results")
    assert cas.clear() == {"file-index": 1, "results": 1}
    assert not old_index.exists() and not old_results.exists()


def test_foreign_files_are_never_replaced_or_deleted(cache_dir: Path) -> None:
    mine = cas.OUTPUTS.path("12" * 32)
    mine.parent.mkdir(parents=True)
    mine.write_text("my notes")
    cas.write(cas.OUTPUTS, "12" * 32, b"payload")
    assert mine.read_text() == "my notes"
    assert cas.discard(cas.OUTPUTS, "12" * 32) is False and mine.exists()
    link = cas.OUTPUTS.path("34" * 32)
    link.symlink_to(mine)
    assert not cas.owned(link, "outputs")
    cas.write(cas.OUTPUTS, "56" * 32, b"ours")
    assert cas.clear() == {"outputs": 1}
    assert mine.read_text() == "my notes" and link.is_symlink()


def test_a_directory_entry_is_marked_first_and_kept_when_stored_twice(cache_dir: Path) -> None:
    seen: list[list[str]] = []

    def fill(tmp: Path) -> None:
        seen.append(sorted(p.name for p in tmp.iterdir()))
        (tmp / "meta.json").write_text(str(len(seen)))

    cas.write_dir(cas.RUN, "aa" * 32, fill, "meta.json")
    cas.write_dir(cas.RUN, "aa" * 32, fill, "meta.json")  # already there: not filled again
    assert seen == [[cas.MARK_FILE]]
    entry = cas.RUN.path("aa" * 32)
    assert (entry / "meta.json").read_text() == "1" and cas.owned(entry, "run")
    assert cas.discard(cas.RUN, "aa" * 32) and not entry.exists()


def test_the_stat_index_hashes_a_file_once_and_again_when_it_changes(cache_dir: Path, tmp_path: Path) -> None:
    f = tmp_path / "t.bin"
    f.write_bytes(b"one")
    d1 = cas.file_digest(f)
    assert cas.info()["kinds"]["file-index"]["entries"] == 1
    f.write_bytes(b"two")  # same size: the change time moves
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns))
    assert cas.file_digest(f) != d1
    assert cas.info()["kinds"]["file-index"]["entries"] == 2


def test_prune_keeps_the_most_recently_used_of_every_namespace(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    for i, ns in enumerate((cas.RESULTS, cas.COMPARE, cas.OUTPUTS)):
        cas.write(ns, f"{i:064x}", b"x" * 1000)
        os.utime(ns.path(f"{i:064x}"), (now - 100 + i, now - 100 + i))
    assert cas.read(cas.RESULTS, f"{0:064x}") == b"x" * 1000  # a read makes it the most recent
    stale = cas.COMPARE.path(".0123456789abcdef-tmp")
    stale.write_bytes(cas.FILE_HEAD)
    os.utime(stale, (now - 2 * cas.STALE_S, now - 2 * cas.STALE_S))
    size = cas.RESULTS.path(f"{0:064x}").stat().st_size
    cas.prune(limit_gb=2.5 * size / 1e9)
    left = {
        ns: sorted(p.name for p in (cache_dir / ns).iterdir()) for ns in ("results", "compare", "outputs")
    }
    assert left == {"results": [f"{0:064x}"], "compare": [], "outputs": [f"{2:064x}"]}
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_MAX_GB", "lots")
    with pytest.raises(cas.UsageError, match="CHARLLM_TRACE_CACHE_MAX_GB"):
        cas.prune()


def test_a_store_walks_the_store_only_when_the_estimate_says_it_may_be_over_the_cap(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stored``: the first store walks (no estimate yet); then stores under the cap add to the
    estimate without a walk; one that passes the cap walks and prunes the least recently used;
    an estimate older than STALE_S walks again; a usage file that is not ours is never replaced."""
    walks: list[float | None] = []
    real = cas.prune
    monkeypatch.setattr(cas, "prune", lambda limit_gb=None: (walks.append(limit_gb), real(limit_gb)))
    now = time.time()
    for i in range(3):
        cas.write(cas.OUTPUTS, f"{i:064x}", b"x" * 1000)
        os.utime(cas.OUTPUTS.path(f"{i:064x}"), (now - 100 + i, now - 100 + i))
        cas.stored(1000)
    assert len(walks) == 1  # the first store: no estimate yet
    size = cas.OUTPUTS.path(f"{0:064x}").stat().st_size
    total, walked = cas._read_usage()
    assert total == size + 2 * 1000 and abs(walked - time.time()) < 60  # the walk's total, then the adds
    monkeypatch.setenv("CHARLLM_TRACE_CACHE_MAX_GB", str(2.5 * size / 1e9))
    cas.stored(1000)  # the estimate passes the cap: a walk, the oldest entry goes
    assert len(walks) == 2 and not cas.OUTPUTS.path(f"{0:064x}").exists()
    assert cas._read_usage()[0] == 2 * size  # what the walk found
    cas.stored(0)
    assert len(walks) == 2
    usage = cache_dir / cas.USAGE_FILE
    usage.write_text(f"{cas._USAGE_HEAD}{2 * size} {time.time() - 2 * cas.STALE_S:.3f}\n")
    cas.stored(0)  # the last walk is old: walk again (stale temporaries, missed concurrent adds)
    assert len(walks) == 3
    usage.write_text("my notes\n")  # a file of that name that is not the store's
    cas.stored(0)
    cas.stored(0)
    assert len(walks) == 5 and usage.read_text() == "my notes\n"  # no estimate: every store walks
    cas.clear()
    assert usage.read_text() == "my notes\n"
    usage.unlink()
    cas.write(cas.OUTPUTS, f"{7:064x}", b"y")
    cas.stored(1)
    assert usage.is_file()
    cas.clear()
    assert not usage.exists()  # ours: cleared with the entries


def test_a_walk_is_never_recorded_after_the_moment_it_ran(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The usage file keeps milliseconds: a walk at 1000.0006 s recorded as 1000.001 would be in the
    future for the next store at 1000.0008 s, which would walk again (seen once in CI)."""
    walks: list[float | None] = []
    real = cas.prune
    monkeypatch.setattr(cas, "prune", lambda limit_gb=None: (walks.append(limit_gb), real(limit_gb)))
    clock = iter([1_000_000_000.0006, 1_000_000_000.0008, 1_000_000_000.0009])
    fake = types.SimpleNamespace(time=lambda: next(clock))
    monkeypatch.setattr(cas, "time", fake)
    cas.write(cas.OUTPUTS, f"{1:064x}", b"x" * 10)
    cas.stored(10)  # no estimate: walks at ...0006
    assert cas._read_usage()[1] <= 1_000_000_000.0006
    cas.stored(10)  # at ...0008: the estimate is fresh, no second walk
    assert len(walks) == 1


def test_concurrent_writers_never_show_a_reader_half_an_entry(cache_dir: Path) -> None:
    payloads = [bytes([65 + i]) * (1 << 18) for i in range(4)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(p: bytes) -> None:
        while not stop.is_set():
            cas.write(cas.OUTPUTS, "77" * 32, p)

    def reader() -> None:
        for _ in range(300):
            try:
                got = cas.read(cas.OUTPUTS, "77" * 32)
                assert got is None or got in payloads
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    try:
        reader()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert not [p for p in (cache_dir / "outputs").iterdir() if p.name.startswith(".")]  # no temporaries left


def test_a_read_only_store_only_means_no_caching(cache_dir: Path) -> None:
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o500)
    try:
        if os.access(cache_dir, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(OSError):
            cas.write(cas.COMPARE, "ab" * 32, b"x")
        assert cas.read(cas.COMPARE, "ab" * 32) is None
        assert cas.info()["entries"] == 0
    finally:
        os.chmod(cache_dir, 0o700)
