"""``analyze --format json`` written a chunk of rows at a time (issue 11: the driver's memory at
1,024 ranks): the same bytes as the whole document, never a whole frame as Python objects, and
no half-written file."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import polars as pl
import pytest

from charllm_trace.analysis.api import analyze_run
from charllm_trace.analysis.results import AnalyzeOptions
from charllm_trace.inputs.loader import load
from charllm_trace.render import export
from tests.conftest import FIXTURES, shared_trace

GLOO = FIXTURES / "cpu-2rank-gloo"


def _whole(res) -> bytes:
    """The document as it was written before streaming: one orjson call on the whole document."""
    return orjson.dumps(export.to_document(res), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


@pytest.mark.parametrize("opts", [AnalyzeOptions(), AnalyzeOptions(per_step=True, what_if={"comm": 0.5})])
def test_streamed_json_is_the_whole_document_byte_for_byte(opts) -> None:
    res = analyze_run(load(GLOO, cache=False), opts)
    want = _whole(res)
    assert res.frames()["collectives"].height > 3  # frames longer than the chunks below
    for chunk in (1, 2, 3, None):
        assert b"".join(export.iter_json(res, chunk)) == want, chunk
    assert export.to_json(res) == want
    doc = json.loads(want)
    assert doc["frames"]["collectives"] == res.frames()["collectives"].to_dicts()


def test_dlrm_streamed_equals_whole() -> None:
    res = analyze_run(
        load(shared_trace("param/dlrm_8ranks_v100"), cache=False), AnalyzeOptions(per_step=True)
    )
    assert res.breakdown is not None and res.breakdown.by.height > 1000
    assert b"".join(export.iter_json(res, 100)) == _whole(res)


def test_json_file_written_a_chunk_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """No frame becomes Python objects whole (at 1,024 ranks the breakdown and launch-queue
    frames are 160,000 and 245,000 rows: hundreds of MB as dicts), and the file is only renamed
    into place once written."""
    res = analyze_run(load(GLOO, cache=False), AnalyzeOptions(per_step=True))
    want = _whole(res)
    monkeypatch.setattr(export, "JSON_CHUNK_ROWS", 2)
    heights: list[int] = []
    to_dicts = pl.DataFrame.to_dicts

    def spy(df: pl.DataFrame) -> list:
        heights.append(df.height)
        return to_dicts(df)

    monkeypatch.setattr(pl.DataFrame, "to_dicts", spy)
    out = tmp_path / "a.json"
    assert export.write(res, "json", out) == [str(out)]
    assert out.read_bytes() == want
    assert heights and max(heights) <= 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]

    def boom(res, chunk=None):  # a failure half way: nothing left, the old file kept
        yield b"{"
        raise RuntimeError("disk full")

    monkeypatch.setattr(export, "iter_json", boom)
    with pytest.raises(RuntimeError):
        export.write(res, "json", out, force=True)
    assert out.read_bytes() == want
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_cli_json_to_stdout_streamed_and_equal_to_the_file(tmp_path: Path, monkeypatch, cache_dir) -> None:
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    r = CliRunner()
    out = tmp_path / "a.json"
    res = r.invoke(main, ["analyze", str(GLOO), "--no-cache", "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    monkeypatch.setattr(export, "JSON_CHUNK_ROWS", 2)
    heights: list[int] = []
    to_dicts = pl.DataFrame.to_dicts
    monkeypatch.setattr(pl.DataFrame, "to_dicts", lambda df: (heights.append(df.height), to_dicts(df))[1])
    res = r.invoke(main, ["analyze", str(GLOO), "--no-cache", "--json"])
    assert res.exit_code == 0, res.output
    assert res.stdout_bytes == out.read_bytes()
    assert heights and max(heights) <= 2
