"""An fsspec input URL over the input size limit (``CHARLLM_TRACE_MAX_INPUT_BYTES``, limits.py):
refused with one line naming the URL and the limit, exit 2, whether its stored bytes are past the
limit or it is a gzip that decompresses past it (as local gzip files are refused)."""

from __future__ import annotations

import gzip

import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from tests.conftest import FIXTURES

fsspec = pytest.importorskip("fsspec")
KINETO = FIXTURES / "cpu-2rank-gloo" / "rank-0.kineto.json.gz"


@pytest.fixture
def memory_files():
    fs = fsspec.filesystem("memory")
    data = gzip.decompress(KINETO.read_bytes())
    fs.pipe("/limits/trace.json", data)
    fs.pipe("/limits/trace.json.gz", gzip.compress(data))
    yield data
    fs.rm("/limits", recursive=True)


def _one_line_error(args: list[str]) -> str:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
    return r.output


def test_url_under_the_limit_is_read(memory_files: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHARLLM_TRACE_MAX_INPUT_BYTES", str(len(memory_files) + 1))
    r = CliRunner().invoke(main, ["info", "memory://limits/trace.json", "--json", "--no-cache"])
    assert r.exit_code == 0, r.output


def test_url_over_the_limit_is_one_line(memory_files: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = len(memory_files) // 2
    monkeypatch.setenv("CHARLLM_TRACE_MAX_INPUT_BYTES", str(limit))
    for cmd in (["info", "--no-cache"], ["analyze", "--no-cache"], ["convert", "-o", "memory://limits/out"]):
        out = _one_line_error([cmd[0], "memory://limits/trace.json", *cmd[1:]])
        assert out.startswith("error: memory://limits/trace.json: ")
        assert f"holds more than {limit:,} bytes" in out and "gzip" not in out  # it is no gzip


def test_gzip_url_expanding_past_the_limit_is_one_line(
    memory_files: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    gz = fsspec.filesystem("memory").cat_file("/limits/trace.json.gz")
    limit = (len(gz) + len(memory_files)) // 2  # the stored bytes fit, the decompressed do not
    assert len(gz) < limit < len(memory_files)
    monkeypatch.setenv("CHARLLM_TRACE_MAX_INPUT_BYTES", str(limit))
    out = _one_line_error(["info", "memory://limits/trace.json.gz", "--no-cache"])
    assert "memory://limits/trace.json.gz" in out or "trace.json.gz" in out
    assert f"decompresses to more than {limit:,} bytes" in out
