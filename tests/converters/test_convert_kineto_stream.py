"""The streaming Kineto reader: the file read in chunks, events framed by the C or the numpy
scanner, gives exactly what parsing the whole JSON with orjson gives, however the chunks fall."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from charllm_trace.converters import jsonframe, kineto_stream
from charllm_trace.converters._io import load_json
from charllm_trace.converters.kineto import parse_kineto, read_kineto
from charllm_trace.core.errors import InputError
from tests.conftest import shared_trace
from tests.helpers.frames import same_frames as _same


@pytest.fixture(params=["c", "numpy"])
def scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Run a test with the C scanner and again with the numpy one."""
    jsonframe.reset()
    if request.param == "numpy":
        monkeypatch.setenv("CHARLLM_TRACE_NATIVE", "0")
    else:
        monkeypatch.delenv("CHARLLM_TRACE_NATIVE", raising=False)
        if jsonframe.lib() is None:
            pytest.skip("the native module is not built here (reinstall with a C compiler)")
    yield request.param
    jsonframe.reset()


def _tricky_doc() -> dict:
    """Events whose strings hold braces, brackets, commas, colons, quotes and backslashes."""
    evs = []
    names = ["a{b}[c],d:e", 'say "hi"', "back\\slash", 'end\\\\"q', "\\", "ü{é}", "", "}]", '"', "[{"]
    for i in range(60):
        nm = names[i % len(names)]
        evs.append(
            {
                "ph": "X",
                "cat": ["cpu_op", "kernel", "cuda_runtime", "user_annotation"][i % 4],
                "name": nm,
                "pid": i % 3,
                "tid": 7 + i % 2,
                "ts": 1000.125 + i,
                "dur": 0.5 + i % 5,
                "args": {"correlation": i, "note": nm, "nested": {"x": [nm, {"y": "}"}]}, "device": 0},
            }
        )
        if i % 7 == 0:
            evs.append({"ph": "f", "id": i, "ts": i, "name": nm, "bp": "e"})
        if i % 11 == 0:
            evs.append({"ph": "Q", "name": "made-up phase " + nm})
        if i % 13 == 0:
            evs.append({"ph": "M", "name": "thread_name", "args": {"name": nm}})
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU {0}"}],
        "traceEvents": evs,
        "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8, "pg_config": []},
        "traceName": 'x "y" {z}',
        "baseTimeNanoseconds": 1700000000000000000,
    }


@pytest.mark.parametrize("indent", [None, 1])
def test_any_chunk_and_batch_size_gives_the_plain_json_result(
    scanner: str, indent: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _tricky_doc()
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=indent, ensure_ascii=indent is None))  # keys after traceEvents too
    want = parse_kineto(load_json(p), p)
    assert want.events.height == 60 and want.rank == 3
    for chunk, batch in [(1, 1), (3, 2), (7, 5), (64, 3), (997, 50_000), (1 << 20, 4)]:
        monkeypatch.setattr(kineto_stream, "CHUNK", chunk)
        monkeypatch.setattr(kineto_stream, "BATCH", batch)
        got = read_kineto(p)
        _same(got, want)
        assert got.n_raw_events == len(doc["traceEvents"])


def test_gzip_is_decompressed_as_it_is_read(
    scanner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _tricky_doc()
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    monkeypatch.setattr(kineto_stream, "CHUNK", 100)
    monkeypatch.setattr(kineto_stream, "BATCH", 9)
    _same(read_kineto(p), parse_kineto(load_json(p), p))


# complete events with their ts and dur: the syntax error is what must be named
@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1},]}', "not valid JSON"),  # trailing comma
        (b'{"traceEvents": [,{"ph": "X", "ts": 1, "dur": 1}]}', "not valid JSON"),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, , {"ph": "X", "ts": 1, "dur": 1}]}',
            "not valid JSON",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X", "ts": 1, "dur": 1}',
            "not valid JSON",
        ),  # truncated
        (b'{"traceEvents": [{"ph": "X", "name": "a}', "not valid JSON"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}}', "not valid JSON"),
        (b'{"traceEvents": [1, 2]}', "malformed Kineto event"),
        (b'{"traceEvents": [], "traceEvents": []}', "two traceEvents"),
        (b'{"traceEvents": {"a": 1}}', "Kineto profile"),
        (b'{"nodes": [{"id": 1}], "schema": "1.0.1"}', "host execution trace"),
        (b'{"hello": [1, 2]}', "no traceEvents"),
        (b"[1, 2]", "not an object"),
        (b"   ", "not valid JSON"),
    ],
)
def test_bad_layouts_are_one_line_input_errors(
    scanner: str, data: bytes, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(data)
    for chunk in (2, 1 << 20):
        monkeypatch.setattr(kineto_stream, "CHUNK", chunk)
        with pytest.raises(InputError) as ei:
            read_kineto(p)
        msg = ei.value.one_line()
        assert words in msg and "\n" not in msg, msg


def test_empty_and_spaced_lists(scanner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "t.json"
    monkeypatch.setattr(kineto_stream, "CHUNK", 3)
    for text in (
        b'{"traceEvents": []}',
        b'{ "traceEvents" : [ \n ] , "x": 1}',
        b'{"a": {"traceEvents": [1]}, "traceEvents": []}',
    ):
        p.write_bytes(text)
        got = read_kineto(p)
        assert got.events.height == 0 and got.n_raw_events == 0


def test_escaped_key_spelling_is_still_read(scanner: str, tmp_path: Path) -> None:
    """A key written with a JSON escape is the same key: those events come through the fallback."""
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 1}
    p = tmp_path / "t.json"
    p.write_bytes(b'{"trace\\u0045vents": [' + json.dumps(ev).encode() + b"]}")
    got = read_kineto(p)
    _same(got, parse_kineto(load_json(p), p))
    assert got.events.height == 1


def _events(data: bytes, sizes: list[int]) -> tuple[list, list, list, list]:
    st = jsonframe.State()
    b = np.frombuffer(data, np.uint8)
    out, i = [], 0
    for s in sizes:
        out.append(jsonframe.scan(b[i : i + s], st, i))
        i += s
    pos, code, dep = (np.concatenate([o[j] for o in out]).tolist() for j in range(3))
    return pos, code, dep, st.a.tolist()


def _random_value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 4 or r < 0.3:
        return rng.choice([1, -2.5e3, 'a\\"b{[,:]}\\\\', "x", True, None, "\\", "é\u2028", ""])
    if r < 0.65:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["k", '"q', "a\\", "{", "]"]
    return {rng.choice(keys) + str(i): _random_value(rng, depth + 1) for i in range(rng.randint(0, 4))}


def test_c_and_numpy_scanners_report_the_same_events(monkeypatch: pytest.MonkeyPatch) -> None:
    jsonframe.reset()
    monkeypatch.delenv("CHARLLM_TRACE_NATIVE", raising=False)
    if jsonframe.lib() is None:
        pytest.skip("the native module is not built here (reinstall with a C compiler)")
    rng = random.Random(5)
    tricky = _tricky_doc()
    docs = [json.dumps({"traceEvents": tricky.pop("traceEvents"), **tricky}).encode()]
    for _ in range(150):
        doc = {
            "traceEvents": [_random_value(rng, 2) for _ in range(rng.randint(0, 20))],
            "x": _random_value(rng),
        }
        docs.append(json.dumps(doc, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5).encode())
    try:
        for data in docs:
            sizes, total = [], 0
            while total < len(data):
                sizes.append(rng.randint(1, 40))
                total += sizes[-1]
            jsonframe.reset()
            monkeypatch.delenv("CHARLLM_TRACE_NATIVE", raising=False)
            whole_c, parts_c = _events(data, [len(data)]), _events(data, sizes)
            jsonframe.reset()
            monkeypatch.setenv("CHARLLM_TRACE_NATIVE", "0")
            whole_np, parts_np = _events(data, [len(data)]), _events(data, sizes)
            assert whole_c == parts_c == whole_np == parts_np
            assert whole_c[3] == [0, 0, 0]  # balanced, outside any string at the end
            # independently: traceEvents (the first key) has one comma fewer than elements
            n = len(json.loads(data)["traceEvents"])
            ev = list(zip(whole_c[1], whole_c[2], strict=True))
            a = ev.index((ord("["), 1))
            z = ev.index((ord("]"), 2), a)
            assert sum(1 for c, d in ev[a + 1 : z] if c == ord(",") and d == 2) == max(n - 1, 0)
    finally:
        jsonframe.reset()


@pytest.mark.parametrize(
    "rel", ["hta/a100_ddp_nccl_rank0.json.gz", "tracelens/mi300_qwen1.5-0.5b_inference.json.gz"]
)
def test_real_profiles_in_small_chunks_with_the_numpy_scanner(
    rel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = shared_trace(rel)
    want = parse_kineto(load_json(p), p)
    jsonframe.reset()
    monkeypatch.setenv("CHARLLM_TRACE_NATIVE", "0")
    monkeypatch.setattr(kineto_stream, "CHUNK", 100_003)
    monkeypatch.setattr(kineto_stream, "BATCH", 777)
    try:
        _same(read_kineto(p), want)
    finally:
        jsonframe.reset()


def test_odd_names_and_categories_match_the_plain_reader(
    scanner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names that look like other values, categories in any case and spellings of the profiler's
    own "Trace" span, across batches (names that are not strings are refused: see below)."""
    names = ["5", "", "True", "[1, 2]", "1.5", "ncclKernel_AllReduce", "NCCL:all_reduce"]
    cats = [
        "kernel",
        "Kernel",
        "KERNEL",
        None,
        "TRACE",
        "Trace",
        "cpu_op",
        "CPU_OP",
        "weird",
        "user_annotation",
    ]
    evs = []
    for i in range(120):
        e = {"ph": "X", "pid": 1, "tid": i % 3, "ts": i, "dur": 1, "cat": cats[(i * 7) % len(cats)]}
        nm = names[(i * 3) % len(names)]
        if nm is not None:
            e["name"] = nm
        if i % 4 == 0:
            e["args"] = {"Collective name": "allreduce", "In msg nelems": i, "dtype": "Float"}
        evs.append(e)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    want = parse_kineto(load_json(p), p)
    assert want.events.height == 120 - sum(1 for e in evs if str(e["cat"]).lower() == "trace")
    assert want.comm_args  # some rows are communication candidates
    for batch in (1, 7, 1000):
        monkeypatch.setattr(kineto_stream, "BATCH", batch)
        _same(read_kineto(p), want)


@pytest.mark.parametrize("name", [5, None, True, [1, 2], {"a": 1}, 1.5])
def test_a_name_that_is_not_a_string_is_refused_by_both_readers(
    scanner: str, name: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28: a complete event without a name, or whose name is a number, list or object, was
    taken by ``str`` without a word; both readers refuse it, in whatever batch it falls."""
    evs = [
        {"ph": "X", "pid": 1, "tid": 1, "ts": i, "dur": 1, "cat": "cpu_op", "name": f"op{i}"}
        for i in range(30)
    ]
    if name is None:
        del evs[17]["name"]
    else:
        evs[17]["name"] = name
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    with pytest.raises(InputError, match="has no name" if name is None else "name is .*expected a string"):
        parse_kineto(load_json(p), p)
    for batch in (1, 7, 1000):
        monkeypatch.setattr(kineto_stream, "BATCH", batch)
        with pytest.raises(
            InputError, match="has no name" if name is None else "name is .*expected a string"
        ):
            read_kineto(p)


def test_the_reading_thread_stops_with_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"ph": 1, ]}, ' + b'{"ph": "X", "name": "a"},' * 2000 + b"{}]}")
    monkeypatch.setattr(kineto_stream, "CHUNK", 1000)  # many chunks still to read when the error comes
    before = threading.active_count()
    with pytest.raises(InputError) as ei:
        read_kineto(p)
    assert threading.active_count() == before  # while the error (and its traceback) is alive
    assert "not valid JSON" in ei.value.one_line()


def test_a_long_run_of_blanks_inside_the_list_is_held_once(
    scanner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip bomb of spaces after ``"traceEvents": [`` is framed chunk by chunk with no comma:
    before, every chunk re-sliced everything held (a copy of the whole run per chunk: quadratic
    time, twice the memory; 620 MB and 3.9 s to refuse a 1 MB bomb at the 256 MB limit, and a
    MemoryError, exit 3, under a 3 GiB address-space cap). Now the buffer grows in place: the
    traced peak stays near the blanks held (24 MiB in 1 MiB chunks: 1.17-1.24x of them, against
    2.17-2.20x before), not twice them."""
    import tracemalloc

    monkeypatch.setattr(kineto_stream, "CHUNK", 1 << 20)
    blanks = 24 << 20
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [' + b" " * blanks + b"]}")
    tracemalloc.start()
    try:
        got = read_kineto(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.events.height == 0
    assert peak < 1.6 * blanks, peak
