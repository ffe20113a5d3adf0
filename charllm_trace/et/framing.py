"""Bytes of a Chakra ET file: decompression and message boundaries, with strict checks.

A Chakra ET is what Chakra's ``protolib.encodeMessage`` writes: a varint length
followed by that many bytes of a protobuf message, repeated; the first message
is ``GlobalMetadata``, every later one a ``Node``. Gzip-compressed files are
recognised by their magic bytes, whatever their name.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from charllm_trace.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The uncompressed bytes of the ET at ``path``; ``InputError`` for unreadable/corrupt files."""
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file or directory")
    if p.is_dir():
        raise InputError(p, "is a directory, not a Chakra ET file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(p, f"cannot read the file ({exc.strerror or exc})") from exc
    if not data:
        raise InputError(p, "file is empty")
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except EOFError as exc:
            raise InputError(p, "gzip stream is truncated") from exc
        except (OSError, zlib.error) as exc:
            raise InputError(p, f"gzip stream is corrupt ({exc})") from exc
        if not data:
            raise InputError(p, "file is empty (after gzip decompression)")
    return data


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
