"""The C event decoder (``jd_decode``, converters/kineto_native.py) against the msgspec reader it
replaced, kept as the oracle (the same reader with the decoder switched off) and against the plain
orjson reader: the converted node and dependency tables, every column, on every shared Kineto
profile; odd values (each of which makes C hand its batch to msgspec) give the same tables or the
same one-line error."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from charllm_trace.converters import jsonframe, kineto, kineto_columns, kineto_native, kineto_stream
from charllm_trace.converters._io import load_json
from charllm_trace.converters.build import kineto_trace
from charllm_trace.converters.kineto import parse_kineto, read_kineto
from charllm_trace.core.errors import InputError
from tests.conftest import shared_trace
from tests.helpers.frames import same_frames as _same
from tests.helpers.kineto_files import KINETO_FILES

ALL_KINETO = sorted({*KINETO_FILES, *(f"param/dlrm_8ranks_v100/kineto_rank{r}.json.gz" for r in range(8))})


@pytest.fixture
def native() -> None:
    jsonframe.reset()
    if kineto_native.decoder() is None:
        pytest.skip("the native module is not built here (reinstall with a C compiler)")


def _oracle(path: Path, monkeypatch: pytest.MonkeyPatch) -> kineto.KinetoProfile:
    """The reader with the C decoder switched off: every batch decoded by msgspec."""
    with monkeypatch.context() as m:
        m.setattr(kineto_native, "decoder", lambda: None)
        return read_kineto(path)


class _Count:
    """Counts the batches the msgspec path decodes while the C decoder is on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        orig = kineto_columns.Columns.add_msgspec

        def spy(cols: kineto_columns.Columns, data: object) -> int:
            self.n += 1
            return orig(cols, data)

        monkeypatch.setattr(kineto_columns.Columns, "add_msgspec", spy)


@pytest.mark.parametrize("rel", ALL_KINETO)
def test_real_profiles_convert_to_the_same_tables(
    rel: str, native: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = shared_trace(rel)
    count = _Count(monkeypatch)
    new = read_kineto(path)
    if rel != "hta/mi250_minitoy_kineto.json.gz":  # (it has values that C hands to msgspec)
        assert count.n == 0, "the C decoder handed a batch to msgspec"
    old = _oracle(path, monkeypatch)
    _same(new, old)
    _same(new, parse_kineto(load_json(path), path))
    t_new, r_new = kineto_trace(new)
    t_old, r_old = kineto_trace(old)
    assert t_new.nodes.columns == t_old.nodes.columns
    assert t_new.nodes.equals(t_old.nodes, null_equal=True)
    assert t_new.deps.equals(t_old.deps, null_equal=True)
    assert r_new == r_old


def _event(**kw: object) -> dict:
    ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25}
    ev.update(kw)
    return {k: v for k, v in ev.items() if v is not _DROP}


_DROP = object()

ODD_EVENTS = {
    "escaped name": _event(name='a\u00e9"b\\c\n'),
    "unicode escape": '{"ph":"X","cat":"kernel","name":"ab\\u0063","pid":0,"tid":1,"ts":1,"dur":1}',
    "surrogate pair": '{"ph":"X","cat":"cpu_op","name":"x\\ud83d\\ude00","pid":0,"tid":1,"ts":1,"dur":1}',
    "utf-8 name": '{"ph":"X","cat":"cpu_op","name":"\u00fc{\u00e9}\u4e2d","pid":0,"tid":1,"ts":1,"dur":1}'.encode().decode(
        "unicode_escape"
    ),
    "missing name and cat": _event(name=_DROP, cat=_DROP),
    "null name": _event(name=None, cat=None),
    "number name": _event(name=5),
    "bool pid": _event(pid=True),
    "float pid": _event(pid=3.0, tid=2.5),
    "string pid": _event(pid="0x1f", tid="stream 7"),
    "big pid": _event(cat="cpu_op", pid=2**62, tid=-(2**62)),
    "string ts": _event(ts="12.5"),
    "null ts": _event(ts=None, dur=_DROP),
    "bool dur": _event(dur=True),
    "int ts": _event(ts=1694128201435418, dur=0),
    "long ts": '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":1,"ts":1694128201435418.123456789,"dur":1e2}',
    "negative dur": _event(dur=-3.5),
    "odd trace spelling": _event(cat="TRACE", pid="Spans"),
    "trace span": _event(cat="Trace", pid="Spans", tid="PyTorch Profiler", ts="x"),
    "null args": _event(args=None),
    "args ids": _event(
        args={"correlation": 5, "External id": 6, "Record function id": 7, "device": 1, "stream": 9}
    ),
    "float args id": _event(args={"correlation": 5.0, "device": 1.5}),
    "comm args": _event(
        name="ncclDevKernel_AllReduce_Sum_f32",
        args={
            "Collective name": "allreduce",
            "In msg nelems": 10,
            "dtype": "Float",
            "Process Group Ranks": "[0, 1]",
            "Seq": 3,
            "Group size": 2,
            "x": [1, {"y": "}"}],
        },
    ),
    "sync args": _event(
        cat="cuda_sync",
        name="Stream Wait Event",
        args={"wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 12},
    ),
    "nested skipped": _event(args={"a": [[[[{"b": [1, 2.5e-3, -0.0, True, False, None]}]]]]}),
    "deep nesting": _event(args={"a": json.loads("[" * 80 + "]" * 80)}),
    "duplicate key": '{"ph":"X","cat":"kernel","name":"a","name":"b","pid":0,"tid":1,"ts":1,"dur":1}',
    "duplicate args key": '{"ph":"X","cat":"kernel","name":"a","pid":0,"tid":1,"ts":1,"dur":1,'
    '"args":{"correlation":1,"correlation":2}}',
    "escaped key": '{"ph":"X","cat":"kernel","n\\u0061me":"a","pid":0,"tid":1,"ts":1,"dur":1}',
    "unlisted phase": '{"ph":"Q","name":"q"}',
    "no phase": '{"name":"q","args":{"x":1}}',
    "big int skipped": '{"ph":"i","name":"q","args":{"x":123456789012345678901234567890}}',
    "huge exponent skipped": '{"ph":"X","cat":"kernel","name":"a","pid":0,"tid":1,"ts":1,"dur":1,"args":{"z":1e400}}',
    "control character escaped": _event(name="tab\there"),
    "flow": '{"ph":"f","id":3,"ts":5,"bp":"e","name":"x","cat":"ac2g"}',
}


def _write(tmp_path: Path, events: list[str], gz: bool = False) -> Path:
    text = '{"schemaVersion":1,"traceEvents":[' + ",\n".join(events) + '],"traceName":"t"}'
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return p


def _text(ev: object) -> str:
    return ev if isinstance(ev, str) else json.dumps(ev)


@pytest.mark.parametrize("case", sorted(ODD_EVENTS))
def test_odd_values_read_as_the_msgspec_reader(
    case: str, native: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = [_text(_event(name=f"op{i}", pid=1, tid=i % 3, ts=100 + i)) for i in range(5)]
    monkeypatch.setattr(kineto_stream, "BATCH", 3)  # the odd event's batch and plain ones around it
    p = _write(tmp_path, [*plain[:2], _text(ODD_EVENTS[case]), *plain[2:]])
    try:
        old = _oracle(p, monkeypatch)
    except InputError as exc:
        with pytest.raises(InputError) as got:
            read_kineto(p)
        assert str(got.value) == str(exc)
        return
    _same(read_kineto(p), old)


@pytest.mark.parametrize(
    "bad",
    [
        '{"ph":"X","cat":"kernel","name":"a","pid":01,"tid":1,"ts":1,"dur":1}',
        '{"ph":"X","cat":"kernel","name":"a","pid":0,"tid":1,"ts":1.,"dur":1}',
        '{"ph":"X","cat":"kernel","name":"a\\x","pid":0,"tid":1,"ts":1,"dur":1}',
        '{"ph":"X","cat":"kernel","name":"a","pid":0,"tid":1,"ts":1,"dur":1,"args":[1]}',
        '{"ph":"X","cat":"kernel","name":"a","pid":0,"tid":1,"ts":"late","dur":1}',
        '{"ph":"X","cat":"kernel","name":"a","pid":0,"tid":1,"ts":1,"dur":1,}',
        '{"ph":"X","cat":"kernel","name":"a","pid":0,"tid":1,"ts":1,"dur":1 "x":2}',
        '{"ph":"X","cat":"kernel","name":"a","pid":tru,"tid":1,"ts":1,"dur":1}',
        "5",
        '{"ph":"X","cat":"kernel","name":"a\x01","pid":0,"tid":1,"ts":1,"dur":1}',
    ],
)
def test_malformed_events_give_the_msgspec_readers_error(
    bad: str, native: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _write(tmp_path, [_text(_event()), bad, _text(_event())], gz=True)
    with pytest.raises(InputError) as want:
        _oracle(p, monkeypatch)
    with pytest.raises(InputError) as got:
        read_kineto(p)
    assert str(got.value) == str(want.value)
    assert "\n" not in str(got.value)


def test_invalid_utf8_in_a_skipped_string_reads_as_msgspec(
    native: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(
        b'{"traceEvents":[' + _text(_event()).encode() + b',{"ph":"i","name":"q","args":{"x":"\xff\xfe"}}]}'
    )
    _same(read_kineto(p), _oracle(p, monkeypatch))
