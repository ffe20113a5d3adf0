"""Chakra ET writer -> reader round trips, and Chakra's own tools reading our files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import polars as pl
import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run
from charllm_trace.et.reader import read_et, read_et_dir
from charllm_trace.et.writer import write_et, write_run
from tests.conftest import shared_trace
from tests.helpers.et_traces import T0, small_trace


def test_write_read_roundtrip(tmp_path: Path) -> None:
    t = small_trace()
    p = tmp_path / "rank-0.et"
    write_et(t, p)
    back = read_et(p, cache=False)
    assert back.equals(t)


def test_gzip_roundtrip(tmp_path: Path) -> None:
    t = small_trace()
    p = tmp_path / "rank-0.et.gz"
    write_et(t, p)
    assert p.read_bytes()[:2] == b"\x1f\x8b"
    assert read_et(p, cache=False).equals(t)


def test_write_refuses_to_overwrite(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.et"
    p.write_bytes(b"precious")
    with pytest.raises(InputError, match="already exists"):
        write_et(small_trace(), p)
    assert p.read_bytes() == b"precious"
    write_et(small_trace(), p, overwrite=True)
    assert read_et(p, cache=False).equals(small_trace())


def test_write_run_and_read_dir(tmp_path: Path) -> None:
    run = Run(traces={0: small_trace(0), 1: small_trace(1)}, manifest={"run_id": "abc", "note": "x"})
    paths = write_run(run, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["rank-0.et", "rank-1.et"]
    back = read_et_dir(tmp_path / "out", cache=False)
    assert back.ranks == [0, 1]
    assert back.manifest == {"run_id": "abc", "note": "x"}
    for r in (0, 1):
        assert back.traces[r].equals(run.traces[r])
    with pytest.raises(InputError, match="already exists"):
        write_run(run, tmp_path / "out")


def _protolib_nodes(path: Path) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    f = openFileRd(str(path))
    gm = pb.GlobalMetadata()
    decodeMessage(f, gm)
    out = []
    while True:
        n = pb.Node()
        if not decodeMessage(f, n):
            break
        out.append(n)
    f.close()
    return gm, out


def test_chakra_protolib_reads_standard_fields(tmp_path: Path) -> None:
    t = small_trace()
    p = tmp_path / "rank-0.et"
    write_et(t, p)
    _, nodes = _protolib_nodes(p)
    assert [n.id for n in nodes] == [1, 2, 3, 4]
    by_id = {n.id: n for n in nodes}
    assert by_id[3].type == pb.COMM_COLL_NODE
    assert by_id[3].start_time_micros == (T0 + 5_555) // 1000
    assert by_id[3].duration_micros == 40  # 40.001 µs rounded
    attrs3 = {a.name: a for a in by_id[3].attr}
    assert attrs3["comm_type"].int64_val == pb.ALL_REDUCE
    assert attrs3["comm_size"].int64_val == 4 << 20
    assert attrs3["pg_name"].string_val == "0"
    assert attrs3["is_cpu_op"].bool_val is False
    assert attrs3["stream"].int64_val == 7
    assert attrs3["charllm.start_ns"].int64_val == T0 + 5_555
    attrs4 = {a.name: a for a in by_id[4].attr}
    assert by_id[4].type == pb.COMM_SEND_NODE
    assert attrs4["comm_src"].int32_val == 0 and attrs4["comm_dst"].int32_val == 1
    assert list(by_id[3].ctrl_deps) == [2] and list(by_id[3].data_deps) == [1]


# the jsonizer installed beside this interpreter (a venv used without activating it), else on PATH
JSONIZER = shutil.which("chakra_jsonizer", path=str(Path(sys.executable).parent)) or shutil.which(
    "chakra_jsonizer"
)


@pytest.mark.skipif(JSONIZER is None, reason="chakra_jsonizer not installed")
def test_chakra_jsonizer_accepts_our_output(spawn, tmp_path: Path) -> None:
    t = small_trace()
    p = tmp_path / "rank-0.et"
    write_et(t, p)
    out = tmp_path / "rank-0.json"
    r = subprocess.run(
        [str(JSONIZER), "--input_filename", str(p), "--output_filename", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    # the jsonizer writes concatenated JSON objects: split them with a raw decoder
    text = out.read_text()
    dec = json.JSONDecoder()
    objs, pos = [], 0
    while pos < len(text):
        obj, pos = dec.raw_decode(text, pos)
        objs.append(obj)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    gm, nodes = objs[0], objs[1:]
    assert len(nodes) == t.nodes.height
    assert any(a["name"] == "charllm.rank" for a in gm["attr"])
    kernel = next(n for n in nodes if n["id"] == "3")
    assert kernel["type"] == "COMM_COLL_NODE"
    assert int(kernel["startTimeMicros"]) == (T0 + 5_555) // 1000
    assert int(kernel["durationMicros"]) == 40


def test_foreign_chakra_et_roundtrip(tmp_path: Path) -> None:
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    t = read_et(src, cache=False)
    _, nodes = _protolib_nodes(src)
    assert t.nodes.height == len(nodes)
    assert t.meta.has_timestamps is False and t.meta.clock == "none"
    assert t.nodes["start_ns"].null_count() == t.nodes.height
    assert t.nodes["dur_ns"].to_list() == [n.duration_micros * 1000 for n in nodes]
    p = tmp_path / "again.et"
    write_et(t, p)
    assert read_et(p, cache=False).equals(t)
    # a foreign attribute with no column survives verbatim
    first = next(n for n in nodes if any(a.name == "op_schema" for a in n.attr))
    row = t.nodes.filter(pl.col("id") == first.id)
    op_schema = next(a.string_val for a in first.attr if a.name == "op_schema")
    assert orjson.loads(row["attrs"][0])["op_schema"] == op_schema


def test_c_scanner_builds_where_a_compiler_exists() -> None:
    """Without this the reader silently falls back to the (correct but slower) numpy decoder."""
    from charllm_trace.et import _native

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("the native module is not built here (reinstall with a C compiler)")
    _native.reset()
    assert _native.lib() is not None


def test_parallel_parts_decode_like_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large files are decoded in two parts on two threads; the result must not depend on it."""
    from charllm_trace.et import fastdecode

    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    whole = read_et(src, cache=False)
    monkeypatch.setattr(fastdecode, "SPLIT_BYTES", 0)
    split = read_et(src, cache=False)
    assert split.equals(whole)
    assert split.deps.height == whole.deps.height


def test_writer_batches_do_not_change_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from charllm_trace.et import writer

    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    t = read_et(src, cache=False)
    one = writer.encode_et(t)
    monkeypatch.setattr(writer, "BATCH", 7)
    assert writer.encode_et(t) == one
    p = tmp_path / "b.et"
    write_et(t, p)
    assert read_et(p, cache=False).equals(t)


def test_numpy_decoder_matches_c_on_chakra_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """The numpy oracle (CHARLLM_TRACE_NATIVE=0) gives the same tables, also when it works in chunks."""
    from charllm_trace.et import _native, oracle

    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    c_trace = read_et(src, cache=False)
    monkeypatch.setenv("CHARLLM_TRACE_NATIVE", "0")
    monkeypatch.setattr(oracle, "PACKED_CHUNK", 1000)
    _native.reset()
    try:
        assert _native.lib() is None
        assert read_et(src, cache=False).equals(c_trace)
    finally:
        monkeypatch.undo()
        _native.reset()
