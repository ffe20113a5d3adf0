"""The fast Kineto reader's paths (a plain .json read in chunks, batches split at any event, whitespace
between events) give exactly what parsing the whole JSON with orjson gives, on every real profile."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest

from charllm_trace.converters import kineto, kineto_stream, kineto_vocab
from charllm_trace.converters._io import load_json
from charllm_trace.converters.kineto import parse_kineto, read_kineto
from charllm_trace.core.errors import InputError
from tests.conftest import shared_trace
from tests.helpers.frames import same_frames as _same
from tests.helpers.kineto_files import KINETO_FILES


@pytest.mark.parametrize("rel", KINETO_FILES)
def test_plain_json_in_small_batches_equals_the_plain_json_reader(
    rel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = orjson.loads(gzip.decompress(shared_trace(rel).read_bytes()))
    p = tmp_path / "t.json"
    p.write_bytes(
        orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    )  # newlines and indentation between the events
    n = len(doc["traceEvents"])
    monkeypatch.setattr(kineto_stream, "BATCH", max(1, n // 7 + 3))  # several batches, uneven split
    fast = read_kineto(p)
    _same(fast, parse_kineto(load_json(p), p))
    assert fast.n_raw_events == n


def test_one_event_per_batch_and_empty_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evs = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 1.5,
            "dur": 2,
            "args": {"device": 0},
        },
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "x"}},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 2, "ts": 1, "dur": 3.25},
    ]
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents" :\n[ ' + b" ,\n\t".join(json.dumps(e).encode() for e in evs) + b" ] }")
    monkeypatch.setattr(kineto_stream, "BATCH", 1)
    _same(read_kineto(p), parse_kineto(load_json(p), p))
    p.write_bytes(b'{"traceEvents": []}')
    assert read_kineto(p).events.height == 0


def test_bad_event_in_a_plain_file_is_an_input_error(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "args": 5}]}')
    with pytest.raises(InputError) as ei:
        read_kineto(p)
    assert "malformed Kineto event" in ei.value.one_line()


def test_unlisted_phases_fall_back_to_the_general_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 3, "tid": 4, "ts": 10.125, "dur": 1.5}
    odd = [
        {"name": "no phase", "ts": 1},
        {"ph": "Q", "name": "made-up phase"},
        {"ph": 7, "name": "numeric phase"},
    ]
    evs = [x, *odd, dict(x, ts=20.5), {"ph": "s", "id": 1, "ts": 1}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    monkeypatch.setattr(kineto_stream, "BATCH", 2)  # batches with and without an odd event
    fast = read_kineto(p)
    _same(fast, parse_kineto(load_json(p), p))
    assert fast.events.height == 2


def test_string_ids_match_the_plain_reader(tmp_path: Path) -> None:
    evs = [{"ph": "X", "cat": "cpu_op", "name": "int", "pid": "7", "tid": "0x10", "ts": 3, "dur": 0}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    fast = read_kineto(p)
    _same(fast, parse_kineto(load_json(p), p))
    assert fast.events["pid"].to_list() == [7]


@pytest.mark.parametrize(
    ("event", "words"),
    [
        ({"ts": 5.5}, "'no dur': dur is missing"),
        ({"dur": 2}, "'no dur': ts is missing"),
        ({"ts": None, "dur": 1}, "ts is missing"),
        ({"ts": True, "dur": 1}, "ts is True"),
        ({"ts": 1, "dur": -1}, "dur is -1, expected a number of microseconds >= 0"),
        ({"ts": 1e16, "dur": 1}, "ts is 1e+16"),
        ({"ts": 1, "dur": "NaN"}, "dur is 'NaN'"),
    ],
)
def test_missing_or_odd_times_are_named_by_both_readers(tmp_path: Path, event: dict, words: str) -> None:
    """Complete events without a usable ts/dur were read as time 0 (issue 15); now both readers
    refuse them, naming the event and the value."""
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "no dur", "pid": 1, "tid": 1, **event},
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    for read in (read_kineto, lambda q: parse_kineto(load_json(q), q)):
        with pytest.raises(InputError) as ei:
            read(p)
        msg = str(ei.value)
        assert str(p) in msg and words.replace("'no dur': ", "") in msg, msg


def test_comm_candidates_equal_may_be_comm_on_odd_names() -> None:
    import polars as pl

    names = ["ncclKernel_AllReduce", "NCCL:all_reduce", "Gloo:send", "c10D::allreduce_", "record_param_comms",
             "Record_Param_Comms", "mſccl", "MPI:x", "ucc:y", "aten::mm", "İmpi:", "xrcclx", "msccl_k", ""]  # fmt: skip
    cats = ["kernel", "cpu_op", "user_annotation", "Kernel", "weird", "python_function", "gpu_memcpy"]
    rows = [(n, c) for n in names for c in cats]
    name_s = pl.Series([n for n, _ in rows])
    cat_s = kineto_vocab.lower_distinct(pl.Series([c for _, c in rows]))
    got = kineto_vocab.comm_candidates(name_s, cat_s).to_list()
    want = [
        i
        for i, (n, c) in enumerate(rows)
        if kineto.may_be_comm(n, kineto.CATEGORY_KIND.get(c.lower(), ("other", False))[0])
        and kineto.CATEGORY_KIND.get(c.lower(), ("other", False))[0]
        in ("kernel", "cpu_op", "annotation", "other")
    ]
    assert got == want and len(want) > 10
