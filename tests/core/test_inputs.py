"""charllm_trace.core.files: the one place untrusted files are opened and gzip is decompressed."""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import pytest

from charllm_trace.core.errors import InputError
from charllm_trace.core.files import BoundedGzip, gunzip, open_regular, path_kind, read_regular, trace_entries


def _err(fn, *args, **kw) -> str:
    with pytest.raises(InputError) as ei:
        fn(*args, **kw)
    return ei.value.one_line()


def test_special_paths_are_named_and_a_fifo_is_never_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "f.json")  # nobody writes to it: a blocking open would hang this test
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone.json")
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    (tmp_path / "d.json").mkdir()
    assert "is a FIFO (named pipe)" in _err(open_regular, tmp_path / "f.json")
    assert "dangling symbolic link" in _err(open_regular, tmp_path / "dangling.json")
    assert "loop of symbolic links" in _err(open_regular, tmp_path / "a.json")
    assert "is a directory" in _err(open_regular, tmp_path / "d.json")
    assert "character device" in _err(read_regular, "/dev/null")
    assert "no such file or directory" in _err(path_kind, tmp_path / "nothing")
    assert path_kind(tmp_path) == "dir"
    (tmp_path / "ok.json").write_bytes(b"{}")
    assert read_regular(tmp_path / "ok.json") == b"{}"


def test_trace_entries_refuse_what_they_would_have_skipped(tmp_path: Path) -> None:
    (tmp_path / "rank-0.et").write_bytes(b"x")
    (tmp_path / ".rank-1.et.tmp").write_bytes(b"half-written")  # hidden: never a trace
    (tmp_path / "notes.txt").write_bytes(b"")
    assert [p.name for p in trace_entries(tmp_path, (".et",))] == ["rank-0.et"]
    os.mkfifo(tmp_path / "rank-1.et")
    assert "rank-1.et: is a FIFO" in _err(trace_entries, tmp_path, (".et",))


def test_gunzip_members_truncation_garbage_and_limits(tmp_path: Path) -> None:
    two = gzip.compress(b"a" * 10) + gzip.compress(b"b" * 5)
    assert gunzip(two, "p") == b"a" * 10 + b"b" * 5
    assert gunzip(two + b"\0\0\0", "p") == b"a" * 10 + b"b" * 5  # zero padding after the last member
    assert "truncated" in _err(gunzip, two[:-6], "p")
    assert "trailing garbage" in _err(gunzip, two + b"xyz", "p")
    bomb = gzip.compress(b"\0" * (8 << 20))
    assert "refused as a gzip bomb" in _err(gunzip, bomb, "p", limit=1 << 20)

    def head(h: bytes) -> None:
        if not h.startswith(b"{"):
            raise InputError("p", "not JSON")

    assert "not JSON" in _err(gunzip, bomb, "p", check_head=head)


def test_the_gzip_ratio_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from charllm_trace.core.limits import gzip_out_limit

    assert gzip_out_limit(10 << 20) == 2000 << 20  # 200x
    monkeypatch.setenv("CHARLLM_TRACE_MAX_GZIP_RATIO", "1000")
    assert gzip_out_limit(10 << 20) == 10000 << 20
    monkeypatch.setenv("CHARLLM_TRACE_MAX_INPUT_BYTES", str(1 << 30))
    assert gzip_out_limit(10 << 20) == 1 << 30
    monkeypatch.setenv("CHARLLM_TRACE_MAX_GZIP_RATIO", "many")
    assert "expected a whole number" in _err(gzip_out_limit, 1)


def test_bounded_gzip_stream() -> None:
    raw = gzip.compress(b"a" * 1000)
    g = BoundedGzip(gzip.GzipFile(fileobj=io.BytesIO(raw)), "x", limit=5000)
    assert g.read(0) == b"" and g.read() == b"a" * 1000 and g.read() == b""
    g = BoundedGzip(gzip.GzipFile(fileobj=io.BytesIO(raw)), "x", limit=500)
    assert len(g.read(100)) == 100
    with pytest.raises(InputError):
        while g.read(64):
            pass
