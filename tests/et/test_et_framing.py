"""The one framing module for Chakra ET varints and length-delimited messages (issue 12 item 5).

Varints are checked against protobuf's own serialisation of ``uint64``/``int64`` fields (edge
values, negative int64s), frames against the reader and against protobuf parsing them back, and
errors on truncated or malformed input. A source scan checks that no other Python file of the
project (package, tests, benchmarks) encodes or decodes varints by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from charllm_trace.core.errors import InputError
from charllm_trace.et import schema as pb
from charllm_trace.et.framing import (
    FramingError,
    MalformedVarint,
    Truncated,
    decode_varint,
    encode_varint,
    frame,
    iter_messages,
    message_bounds,
)

ROOT = Path(__file__).resolve().parents[2]

UNSIGNED = [
    0,
    1,
    127,
    128,
    255,
    300,
    16383,
    16384,
    2**21,
    2**32 - 1,
    2**32,
    2**56,
    2**63 - 1,
    2**63,
    2**64 - 1,
]
SIGNED = [-1, -2, -128, -(2**31), -(2**62), -(2**63)]


def _field_varint(field: str, value: int) -> bytes:
    """The varint protobuf writes for ``value`` in a varint field of AttributeProto (tag removed)."""
    tag = pb.AttributeProto(**{field: 1}).SerializeToString()[:-1]
    data = pb.AttributeProto(**{field: value}).SerializeToString()
    assert data.startswith(tag)
    return data[len(tag) :]


@pytest.mark.parametrize("value", UNSIGNED)
def test_unsigned_varints_are_protobufs(value: int) -> None:
    enc = encode_varint(value)
    assert enc == _field_varint("uint64_val", value)
    assert decode_varint(enc) == (value, len(enc))


@pytest.mark.parametrize("value", SIGNED + [0, 127, 2**63 - 1])
def test_int64_varints_are_protobufs(value: int) -> None:
    """Negative int64s are ten bytes of two's complement, as protobuf writes them; decoding
    gives the unsigned 64-bit value."""
    enc = encode_varint(value)
    assert enc == _field_varint("int64_val", value)
    assert decode_varint(enc) == (value % 2**64, len(enc))
    if value < 0:
        assert len(enc) == 10


def test_varint_lengths_at_the_boundaries() -> None:
    for k in range(1, 10):
        assert len(encode_varint(2 ** (7 * k) - 1)) == k
        assert len(encode_varint(2 ** (7 * k))) == k + 1
    assert len(encode_varint(2**64 - 1)) == 10


def test_values_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ValueError, match="64-bit"):
        encode_varint(2**64)
    with pytest.raises(ValueError, match="int64"):
        encode_varint(-(2**63) - 1)


def test_decode_from_an_offset_and_from_every_buffer_type() -> None:
    data = b"\xaa" + b"".join(encode_varint(v) for v in UNSIGNED)
    for buf in (data, bytearray(data), memoryview(data), np.frombuffer(data, dtype=np.uint8)):
        pos, got = 1, []
        while pos < len(data):
            v, pos = decode_varint(buf, pos)
            got.append(v)
        assert got == UNSIGNED and pos == len(data)


def test_truncated_varints_are_a_named_error() -> None:
    for data in (b"", b"\x80", b"\xff\xff\xff", encode_varint(2**63)[:-1]):
        with pytest.raises(Truncated, match="ends inside a varint") as ei:
            decode_varint(data)
        assert ei.value.pos == len(data)
        assert isinstance(ei.value, FramingError) and isinstance(ei.value, ValueError)
    # ``end`` cuts the data short
    with pytest.raises(Truncated):
        decode_varint(b"\x80\x01", 0, 1)
    assert decode_varint(b"\x80\x01", 0, 2) == (128, 2)


def test_a_varint_longer_than_ten_bytes_is_malformed() -> None:
    with pytest.raises(MalformedVarint, match="longer than 10 bytes") as ei:
        decode_varint(b"\x00\x80" + b"\x80" * 9 + b"\x01", 1)
    assert ei.value.pos == 1


def test_frames_round_trip_and_parse_as_protobuf() -> None:
    gm = pb.GlobalMetadata(version="0.0.4").SerializeToString()
    nodes = [pb.Node(id=i, name="x" * (40 * i)).SerializeToString() for i in range(1, 6)]
    bodies = [gm, *nodes, b""]  # protolib stops at an empty message, but the framing allows one
    data = b"".join(frame(b) for b in bodies)
    assert data == b"".join(encode_varint(len(b)) + b for b in bodies)
    assert list(iter_messages(data)) == bodies
    starts, lens = message_bounds(memoryview(data), "x.et")
    assert lens.tolist() == [len(b) for b in bodies]
    assert [bytes(memoryview(data)[s : s + n]) for s, n in zip(starts, lens, strict=True)] == bodies
    back = pb.Node()
    back.ParseFromString(list(iter_messages(data))[3])
    assert back.id == 3 and back.name == "x" * 120


def test_truncated_frames_name_the_file() -> None:
    data = frame(pb.GlobalMetadata(version="0.0.4").SerializeToString()) + frame(b"\x08\x01" * 100)
    with pytest.raises(InputError, match="truncated: message 1 needs 200 bytes") as ei:
        list(iter_messages(data[:-1], "cut.et"))
    assert "cut.et" in ei.value.one_line()
    with pytest.raises(InputError, match="truncated: a message length"):
        list(iter_messages(data[:-201] + b"\x80", "cut.et"))  # cut inside the second length


def test_the_reader_reports_a_cut_first_length(tmp_path: Path) -> None:
    from charllm_trace.et.reader import read_et

    p = tmp_path / "cut.et"
    p.write_bytes(b"\xff\xff")
    with pytest.raises(InputError, match="ends inside the first message length"):
        read_et(p, cache=False)
    p.write_bytes(b"\xff" * 11)
    with pytest.raises(InputError, match="malformed first message length"):
        read_et(p, cache=False)


# ---- one framing module -----------------------------------------------------

#: What hand-written varint code looks like: masking or setting the continuation bit, shifting
#: by 7 bits, or protobuf's private varint helpers. (The vectorised numpy decoder in
#: et/oracle.py works on arrays with named numpy constants and is not matched.)
VARINT_CODE = re.compile(
    r"google\.protobuf\.internal\.(?:en|de)coder|_DecodeVarint|_VarintBytes|_EncodeVarint"
    r"|&\s*0x7[fF]\b|\|\s*0x80\b|0x80\s*\||>>=?\s*7\b|<<\s*7\b|<<\s*shift\b"
)
FRAMING = ROOT / "charllm_trace" / "et" / "framing.py"


def varint_code(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if VARINT_CODE.search(ln)]


def test_the_scan_sees_hand_written_varints() -> None:
    encoder = "def _varint(v):\n    while True:\n        b = v & 0x7F\n        v >>= 7\n        out.append(b | 0x80)\n"
    decoder = "size |= (b & 0x7f) << shift\n"
    private = "from google.protobuf.internal.decoder import _DecodeVarint32\n"
    assert len(varint_code(encoder)) == 3
    assert varint_code(decoder) and varint_code(private)
    assert not varint_code("x = a & 0x7FFF\nflags |= 0x800\ny = n << 70\n")
    assert varint_code(FRAMING.read_text())  # framing.py itself has them


def test_no_varint_code_outside_the_framing_module() -> None:
    files = [p for d in ("charllm_trace", "tests", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
    found = {
        str(p.relative_to(ROOT)): hits
        for p in files
        if p != FRAMING
        and p.name != Path(__file__).name
        and (hits := varint_code(p.read_text(encoding="utf-8")))
    }
    assert not found, f"varints encoded/decoded outside charllm_trace/et/framing.py: {found}"
