"""Decoder details the round-trip tests do not reach: strict UTF-8 checking of every text field
(where the bytes are invalid, which field is named), text around the fast-path boundaries, and
dependency columns; always with the C scanner, the numpy decoder and the protobuf reference."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import encodeMessage

from charllm_trace.core.errors import InputError
from charllm_trace.core.model import DEP_SCHEMA
from charllm_trace.et import _native
from charllm_trace.et.framing import decode_varint, encode_varint
from charllm_trace.et.reader import decode_et_reference, read_et
from tests.conftest import shared_trace


@pytest.fixture
def decoder(et_decoder: str) -> str:
    """The test runs with the C scanner and with the pure numpy decoder (conftest.et_decoder)."""
    return et_decoder


_varint = encode_varint


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _node(
    nid: int, name: bytes = b"op", io: tuple[bytes, ...] | None = None, attr: bytes | None = None
) -> bytes:
    """A Node message written by hand, so that its text fields can hold any bytes."""
    msg = _varint(1 << 3) + _varint(nid) + _field(2, name) + _varint(3 << 3) + _varint(pb.COMP_NODE)
    if io is not None:
        msg += _field(8, _field(1, io[0]) + _field(2, io[1]) + _field(3, io[2]))
        msg += _field(9, _field(1, io[3]) + _field(2, io[4]) + _field(3, io[5]))
    if attr is not None:
        msg += _field(10, attr)
    return msg


def _attr(name: bytes, value: bytes) -> bytes:
    return _field(1, name) + _field(29, value)  # AttributeProto: name, string_val


def _write(path: Path, nodes: list[bytes]) -> Path:
    with open(path, "wb") as f:
        encodeMessage(f, pb.GlobalMetadata(version="0.0.4"))
        for m in nodes:
            f.write(_varint(len(m)) + m)
    return path


IO_FIELDS = [
    "inputs.values",
    "inputs.shapes",
    "inputs.types",
    "outputs.values",
    "outputs.shapes",
    "outputs.types",
]
OK_IO = (b"[1]", b"[[2, 3]]", b"['Tensor(float)']", b"[]", b"[[]]", b"['Int']")


def _bad_at(place: str, bad: bytes) -> bytes:
    """One node whose text at ``place`` is ``bad`` (all other text is valid)."""
    io = list(OK_IO)
    name, attr = b"aten::mm", _attr(b"op_schema", b"aten::mm(Tensor self) -> Tensor")
    if place == "name":
        name = bad
    elif place in IO_FIELDS:
        io[IO_FIELDS.index(place)] = bad
    elif place == "attribute value":
        attr = _attr(b"op_schema", bad)
    elif place == "attribute name":
        attr = _attr(bad, b"x")
    return _node(5, name, tuple(io), attr)


# every kind of invalid sequence the strict (RFC 3629) check must refuse, at different offsets
INVALID = [
    b"\xff",
    b"\xc0\x80",  # overlong NUL
    b"\xe0\x80\xaf",  # overlong
    b"\xed\xa0\x80",  # a surrogate
    b"\xf4\x90\x80\x80",  # beyond U+10FFFF
    b"\xf8\x88\x80\x80\x80",
    b"\x80",  # a continuation byte first
    b"\xe2\x82",  # cut by the end of the string
]


@pytest.mark.parametrize("place", ["name", *IO_FIELDS, "attribute value", "attribute name"])
def test_invalid_utf8_is_refused_and_placed(tmp_path: Path, decoder: str, place: str) -> None:
    for k, seq in enumerate(INVALID):
        for prefix in (b"", b"a" * 7, b"b" * 16, b"c" * 45):
            bad = prefix + seq + (b"" if k == len(INVALID) - 1 else b"tail")
            with pytest.raises(UnicodeDecodeError):
                bad.decode("utf-8")
            p = _write(tmp_path / "bad.et", [_node(1), _bad_at(place, bad), _node(9)])
            with pytest.raises(InputError, match="UTF-8") as exc:
                read_et(p, cache=False)
            expected = {
                "name": "a node name",
                "attribute value": "an attribute value",
                "attribute name": "an attribute name",
            }.get(place, place)
            assert f"{expected} is not valid UTF-8" in str(exc.value), (place, bad, str(exc.value))


def test_the_first_field_in_column_order_is_named(tmp_path: Path, decoder: str) -> None:
    """Several invalid fields: the report names the same one whatever the decoder or file order."""
    late_name = _node(8, b"\xff", OK_IO)
    early_shape = _node(2, b"ok", (b"[1]", b"\xc3", *OK_IO[2:]))
    early_value = _node(3, b"ok", OK_IO, _attr(b"k", b"\xed\xa0\x80"))
    p = _write(tmp_path / "two.et", [early_value, early_shape, late_name])
    with pytest.raises(InputError, match="a node name is not valid UTF-8"):
        read_et(p, cache=False)
    p = _write(tmp_path / "three.et", [early_value, early_shape])
    with pytest.raises(InputError, match="inputs.shapes is not valid UTF-8"):
        read_et(p, cache=False)


# valid text around the lengths where the checks and the views change strategy
VALID = [
    b"",
    "é".encode(),
    "✓".encode(),
    "𝄞".encode(),  # 4 bytes
    b"a" * 7 + "é".encode(),
    b"a" * 11 + "é".encode(),  # 13 bytes: the first one not inline in a view
    b"a" * 12,
    b"a" * 13,
    b"a" * 15 + "€".encode(),
    b"a" * 16,
    ("x" * 31 + "ü" + "y" * 40 + "𝄞").encode(),
    "\u07ff\u0800\uffff\U00010000\U0010ffff".encode(),
]


def test_valid_text_of_every_length(tmp_path: Path, decoder: str) -> None:
    nodes = []
    for k, s in enumerate(VALID):
        io = tuple(VALID[(k + j) % len(VALID)] for j in range(6))
        nodes.append(_node(k + 1, s, io, _attr(VALID[(k + 3) % len(VALID)] or b"n", s)))
    p = _write(tmp_path / "ok.et", nodes)
    t = read_et(p, cache=False)
    ref, _ = decode_et_reference(p.read_bytes(), p)
    assert t.equals(ref)
    assert t.nodes["name"].to_list() == [s.decode() for s in VALID]
    shapes = t.nodes["inputs"].struct.field("shapes").to_list()
    assert shapes == [VALID[(k + 1) % len(VALID)].decode() for k in range(len(VALID))]


def test_dependencies_packed_and_unpacked(tmp_path: Path, decoder: str) -> None:
    """ctrl/data dependencies as packed and as single varints (both are valid protobuf), in wire order."""
    m = (
        _node(1)
        + _varint(4 << 3)
        + _varint(7)
        + _field(5, _varint(9) + _varint(2**40))
        + _varint(4 << 3)
        + _varint(8)
    )
    m2 = _node(2) + _field(4, b"") + _field(5, _varint(1))
    neg = _node(3) + _field(4, _varint(2**64 - 1))  # -1 as an int64
    # every node named by a dependency is in the file (a dependency on an absent node is dropped)
    others = [_node(i) for i in (4, 7, 8, 9, 2**40, 2**64 - 1)]
    p = _write(tmp_path / "deps.et", [m, m2, neg, *others])
    t = read_et(p, cache=False)
    ref, _ = decode_et_reference(p.read_bytes(), p)
    assert t.equals(ref)
    assert t.deps.schema == pl.Schema(DEP_SCHEMA)
    rows = t.deps.rows()
    assert sorted(rows) == sorted(
        [(1, 7, "ctrl"), (1, 9, "data"), (1, 2**40, "data"), (1, 8, "ctrl"), (2, 1, "data"), (3, -1, "ctrl")]
    )
    assert t.deps.filter(pl.col("kind") == "ctrl").height == 3
    assert t.deps.filter(pl.col("kind") == "data").height == 3


def test_string_kinds_become_the_model_enum() -> None:
    """Producers may build ``kind`` as strings: the Trace holds the model's enum, same values."""
    from charllm_trace.core.model import DEP_KINDS, Trace, conform

    nodes = pl.DataFrame({"id": [1, 2, 3]})
    deps = pl.DataFrame({"node": [2, 3, 3], "dep": [1, 1, 2], "kind": ["ctrl", "data", "ctrl"]})
    t = Trace(nodes=nodes, deps=deps)
    assert t.deps.schema == pl.Schema(DEP_SCHEMA)
    assert t.deps["kind"].to_list() == ["ctrl", "data", "ctrl"]
    assert t.deps.filter(pl.col("kind") == "ctrl")["dep"].to_list() == [1, 2]
    assert t.deps["kind"].cast(pl.String).equals(deps["kind"])
    assert list(t.deps["kind"].dtype.categories) == list(DEP_KINDS)  # type: ignore[attr-defined]
    both = pl.concat([t.deps, conform(deps, DEP_SCHEMA)])
    assert both.height == 6 and both.schema == pl.Schema(DEP_SCHEMA)


def test_attribute_text_escaped_at_every_position(tmp_path: Path, decoder: str) -> None:
    """The attrs JSON escapes quotes, backslashes and control characters wherever they sit
    (the C writer copies runs 8 bytes at a time): the same text as orjson's."""
    nodes = []
    for k, special in enumerate(['"', "\\", "\n", "\x01", "\x1f", "\x7f", "é", "✓"]):
        for pos in range(0, 26, 1):
            text = ("abcdefghijklmnopqrstuvwxy"[:pos] + special + "z" * (25 - pos)).encode()
            nodes.append(_node(1 + k * 100 + pos, b"op", None, _attr(b"note", text)))
    p = _write(tmp_path / "esc.et", nodes)
    t = read_et(p, cache=False)
    ref, _ = decode_et_reference(p.read_bytes(), p)
    assert t.equals(ref)
    got = [orjson.loads(a)["note"] for a in t.nodes.sort("id")["attrs"].to_list()]
    assert len(got) == len(nodes) and all(len(g) == 26 for g in got)


# --- decoding in two parts (large files): the split point is guessed, then checked ------------


def _two_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    from charllm_trace.et import fastdecode

    monkeypatch.setattr(fastdecode, "SPLIT_BYTES", 0)
    monkeypatch.setenv("CHARLLM_TRACE_THREADS", "2")


def _one_part(path: Path, monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as m:
        m.setenv("CHARLLM_TRACE_THREADS", "1")
        try:
            return read_et(path, cache=False), None
        except InputError as exc:
            return None, str(exc)


@pytest.mark.parametrize("shift", [0, 1, 7, 100])
def test_a_wrong_split_guess_is_caught(monkeypatch: pytest.MonkeyPatch, shift: int) -> None:
    """The second part starts at a guessed boundary; a guess inside a message is detected and the
    rest is decoded from the true boundary: the tables are the same as from one part."""
    from charllm_trace.et import fastdecode

    if _native.lib() is None:
        pytest.skip("the native C scanner is not built here (reinstall with a C compiler)")
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    whole, _ = _one_part(src, monkeypatch)
    real = fastdecode.split_point
    guesses = []

    def off(so, data, begin, size):
        g = real(so, data, begin, size) + shift
        guesses.append(g)
        return g

    real_part = fastdecode._decode_part
    starts = []

    def part(data, begin, *a, **k):
        starts.append(begin)
        return real_part(data, begin, *a, **k)

    _two_parts(monkeypatch)
    monkeypatch.setattr(fastdecode, "split_point", off)
    monkeypatch.setattr(fastdecode, "_decode_part", part)
    t = read_et(src, cache=False)
    assert guesses, "the file was not decoded in two parts"
    # a wrong guess costs a third part: the second decoded again from the true boundary
    assert len(starts) == (2 if shift == 0 else 3)
    assert t.equals(whole) and t.deps.height == whole.deps.height


def test_without_a_guess_the_framing_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    so = _native.lib()
    if so is None:
        pytest.skip("the native C scanner is not built here (reinstall with a C compiler)")
    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    whole, _ = _one_part(src, monkeypatch)
    _two_parts(monkeypatch)
    calls = []
    real_walk = so.et_walk

    def walk(*a):
        calls.append(a)
        return real_walk(*a)

    monkeypatch.setattr(so, "et_resync", lambda *a: -1)
    monkeypatch.setattr(so, "et_walk", walk)
    t = read_et(src, cache=False)
    assert calls and t.equals(whole)


@pytest.mark.parametrize("where", [0.3, 0.8])
def test_errors_in_either_part_name_the_same_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: float
) -> None:
    """A corrupt node in the first or the second part: the same one-line error as in one part
    (the second part's message numbers are shifted by the first part's count)."""
    if _native.lib() is None:
        pytest.skip("the native C scanner is not built here (reinstall with a C compiler)")
    src = shared_trace("chakra/feeder_tests_chakra.0.et").read_bytes()
    # find the message that starts at or after the wanted fraction of the file, and give it an
    # invalid field tag (wire type 7) right after its length prefix
    pos, k, at = 0, 0, int(len(src) * where)
    while True:
        length, q = decode_varint(src, pos)
        if pos >= at and k > 0:
            break
        pos, k = q + length, k + 1
    bad = bytearray(src)
    bad[q] = 0x0F  # field 1, wire type 7
    p = tmp_path / "bad.et"
    p.write_bytes(bytes(bad))
    _, one = _one_part(p, monkeypatch)
    assert one is not None and f"message {k}" in one, one
    _two_parts(monkeypatch)
    with pytest.raises(InputError) as exc:
        read_et(p, cache=False)
    assert str(exc.value) == one


def test_more_attribute_names_than_the_first_table_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner's table of attribute names is too small: the part is scanned again with a larger
    one (there is no numpy fallback), and the tables are the same."""
    from charllm_trace.et import nodescan

    src = shared_trace("chakra/feeder_tests_chakra.0.et")
    whole = read_et(src, cache=False)
    so = _native.lib()
    real_scan = so.et_scan
    codes = []

    def scan(*a):  # noqa: ANN002, ANN202 - the scanner's 27 arguments
        rc = real_scan(*a)
        codes.append(rc)
        return rc

    monkeypatch.setattr(nodescan, "NAME_TABLE", 8)  # room for 3 names
    monkeypatch.setattr(so, "et_scan", scan)
    t = read_et(src, cache=False)
    monkeypatch.undo()
    assert -11 in codes, "the name table never overflowed"
    assert t.equals(whole) and t.deps.height == whole.deps.height
