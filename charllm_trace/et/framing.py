"""Bytes of a Chakra ET file: varints, message framing, decompression, with strict checks.

A Chakra ET is what Chakra's ``protolib.encodeMessage`` writes: a varint length
followed by that many bytes of a protobuf message, repeated; the first message
is ``GlobalMetadata``, every later one a ``Node``. Gzip-compressed files are
recognised by their magic bytes, whatever their name.

This is the one Python module that encodes and decodes ET varints and message
frames (the reader, the writer, ``sanitize`` and the ASTRA-sim export use it).
The other decoders are the compiled scanner (``et/_etscan.c``, the only path for
reading) and the vectorised numpy decoder in ``et/oracle.py`` (the scanner's test
oracle), which decode whole arrays of varints at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from charllm_trace.core.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"

MASK64 = (1 << 64) - 1
INT64_MIN = -(1 << 63)
#: The longest varint protobuf writes (a 64-bit value, or a negative int64).
MAX_VARINT_BYTES = 10


class FramingError(ValueError):
    """Bytes that are not a valid varint or message frame; ``pos`` is the byte where it shows."""

    def __init__(self, problem: str, pos: int) -> None:
        super().__init__(f"{problem} at byte {pos}")
        self.problem = problem
        self.pos = pos


class Truncated(FramingError):
    """The data ends inside a varint or a message."""


class MalformedVarint(FramingError):
    """A varint longer than :data:`MAX_VARINT_BYTES` bytes."""


def encode_varint(value: int) -> bytes:
    """The protobuf varint of ``value``: 0 <= value < 2**64, or a negative int64 (ten bytes,
    two's complement, as protobuf writes ``int64`` fields)."""
    if 0 <= value < 0x80:
        return bytes((value,))
    if value < 0:
        if value < INT64_MIN:
            raise ValueError(f"{value} does not fit in an int64 varint")
        value &= MASK64
    elif value > MASK64:
        raise ValueError(f"{value} does not fit in a 64-bit varint")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: Any, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """(value, position after it) of the varint at ``pos`` of ``data`` (bytes, a memoryview or
    a uint8 array), reading no further than ``end``. The value is unsigned (below 2**64).

    Raises :class:`Truncated` when ``end`` comes first and :class:`MalformedVarint` for a
    varint longer than ten bytes.
    """
    if end is None:
        end = len(data)
    value = 0
    shift = 0
    p = pos
    while True:
        if p >= end:
            raise Truncated("the data ends inside a varint", p)
        b = int(data[p])
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value & MASK64, p
        shift += 7
        if shift >= 7 * MAX_VARINT_BYTES:
            raise MalformedVarint(f"a varint longer than {MAX_VARINT_BYTES} bytes", pos)


def frame(body: bytes) -> bytes:
    """``body`` as one length-delimited message: its length as a varint, then the bytes."""
    return encode_varint(len(body)) + body


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The uncompressed bytes of the ET at ``path`` (a regular file); ``InputError`` for
    unreadable/corrupt files. A gzip file's start is checked as an ET (a first message that can
    be a GlobalMetadata) before the rest is decompressed, and its expansion is bounded
    (:func:`charllm_trace.core.files.gunzip`)."""
    from charllm_trace.core.files import read_maybe_gzipped

    p = Path(path)
    return read_maybe_gzipped(
        p, "a Chakra ET file", lambda head: check_head(head, p), "file is empty (after gzip decompression)"
    )


def check_head(head: bytes, path: Any) -> None:
    """The first bytes of an ET (up to 4 KiB) can begin one: not text, a first message that is not
    empty and, when it lies within ``head``, parses as a GlobalMetadata."""
    from google.protobuf.message import DecodeError

    from charllm_trace.et import schema as pb

    text = sniff_text(head)
    if text:
        raise InputError(path, text)
    try:
        length, pos = decode_varint(head, 0, len(head))
    except FramingError:
        raise InputError(path, "not a Chakra ET: malformed first message length") from None
    if length == 0:
        raise InputError(path, "not a Chakra ET: the first message is empty (not a GlobalMetadata)")
    if pos + length <= len(head):
        gm = pb.GlobalMetadata()
        try:
            gm.ParseFromString(head[pos : pos + length])
        except DecodeError:
            raise InputError(path, "not a Chakra ET: the first message is not a GlobalMetadata") from None
        if not gm.version and not len(gm.attr):
            raise InputError(path, "not a Chakra ET: the first message is not a Chakra GlobalMetadata")


def sniff_text(data: bytes) -> str | None:
    """A description of ``data`` when it is text (JSON, usually), not a binary ET."""
    head = data[:4096].lstrip()
    if not head:
        return None
    if head[:1] in (b"{", b"["):
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as exc:
            # a multi-byte character cut at 4096 is still text
            if exc.start < len(head) - 4:
                return None
        return "looks like JSON text, not a binary Chakra ET (a Kineto profile or PyTorch host ET? try `charllm-trace convert`)"
    return None


def message_bounds(
    data: Any, path: str | os.PathLike[str] | None, start: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets and lengths of every length-delimited message in ``data``.

    Raises ``InputError`` when a length varint is malformed or runs past the end,
    or when the last message is cut short (a truncated file).
    """
    starts: list[int] = []
    lens: list[int] = []
    append_s = starts.append
    append_l = lens.append
    end = len(data)
    pos = start
    first = start == 0
    base = 0 if first else 1  # message numbers count the GlobalMetadata as message 0
    while pos < end:
        b = data[pos]
        if b < 0x80:
            size = b
            pos += 1
        else:
            size = b & 0x7F
            shift = 7
            pos += 1
            while True:
                if pos >= end:
                    raise InputError(
                        path, f"truncated: a message length at byte {pos} runs past the end of the file"
                    )
                b = data[pos]
                pos += 1
                size |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift >= 35:
                    raise InputError(
                        path,
                        f"not a Chakra ET: malformed message length at byte {pos} (message {len(starts) + base})",
                    )
        if pos + size > end and first and not starts:
            raise InputError(path, "not a Chakra ET: its first message would run past the end of the file")
        if pos + size > end:
            raise InputError(
                path,
                f"truncated: message {len(starts) + base} needs {size} bytes at byte {pos} "
                f"but the file ends after {end - pos}",
            )
        append_s(pos)
        append_l(size)
        pos += size
    return np.asarray(starts, dtype=np.int64), np.asarray(lens, dtype=np.int64)


def iter_messages(data: Any, path: str | os.PathLike[str] | None = None) -> Iterator[Any]:
    """Every length-delimited message of ``data`` (slices of it), checked as by :func:`message_bounds`."""
    starts, lens = message_bounds(data, path)
    for s, n in zip(starts.tolist(), lens.tolist(), strict=True):
        yield data[s : s + n]
