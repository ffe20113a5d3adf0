"""How many bytes an Arrow IPC file decodes to, read from its own metadata before decoding it.

A frame compressed with zstd or LZ4 can expand a million times (a 389 KB results zip held a frame
of 9.6 GB). Every body buffer of a compressed record batch starts with its uncompressed length
(Arrow's IPC format: ``BodyCompression``), so the sum of those lengths over the footer's record
and dictionary batches is what decoding allocates; :func:`decoded_bytes` adds them up, reading the
footer's flatbuffers here (a few dozen lines, no pyarrow), every offset bounds-checked.
"""

from __future__ import annotations

import struct

MAGIC = b"ARROW1"
_RECORD_BATCH, _DICTIONARY_BATCH = 3, 2


class NotIpc(ValueError):
    """Not an Arrow IPC file, or its metadata points outside it."""


class _Flat:
    """Read-only access to the flatbuffer tables of ``buf`` (offsets checked against its length)."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def _at(self, fmt: str, pos: int) -> int:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.buf):
            raise NotIpc("an offset outside the file")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def root(self, pos: int) -> int:
        return pos + self._at("<I", pos)

    def field(self, table: int, i: int) -> int | None:
        """The position of field ``i`` of the table at ``table``, None when absent."""
        vt = table - self._at("<i", table)
        if 4 + 2 * i >= self._at("<H", vt):
            return None
        off = self._at("<H", vt + 4 + 2 * i)
        return table + off if off else None

    def scalar(self, table: int, i: int, fmt: str, default: int = 0) -> int:
        pos = self.field(table, i)
        return default if pos is None else self._at(fmt, pos)

    def ref(self, table: int, i: int) -> int | None:
        """The table or vector field ``i`` points to."""
        pos = self.field(table, i)
        return None if pos is None else pos + self._at("<I", pos)

    def vector(self, table: int, i: int, item: int) -> list[int]:
        """Positions of the items (structs of ``item`` bytes) of vector field ``i``."""
        at = self.ref(table, i)
        if at is None:
            return []
        n = self._at("<I", at)
        if at + 4 + n * item > len(self.buf):
            raise NotIpc("a vector past the end of the file")
        return [at + 4 + k * item for k in range(n)]


def _batch_bytes(data: bytes, offset: int, meta_len: int) -> int:
    """Decoded bytes of the record batch (or dictionary batch) whose message is at ``offset``."""
    f = _Flat(data)
    start = offset + 8 if f._at("<I", offset) == 0xFFFFFFFF else offset + 4
    msg = f.root(start)
    kind = f.scalar(msg, 1, "<B")
    batch = f.ref(msg, 2)
    if batch is None or kind not in (_RECORD_BATCH, _DICTIONARY_BATCH):
        raise NotIpc("a batch block that is not a record or dictionary batch")
    if kind == _DICTIONARY_BATCH:
        batch = f.ref(batch, 1)
        if batch is None:
            return 0
    body = offset + meta_len
    compressed = f.field(batch, 3) is not None
    total = 0
    for b in f.vector(batch, 2, 16):
        off, length = f._at("<q", b), f._at("<q", b + 8)
        if off < 0 or length < 0 or body + off + length > len(data):
            raise NotIpc("a buffer outside the file")
        if compressed and length >= 8:
            raw = f._at("<q", body + off)
            total += length - 8 if raw == -1 else max(raw, 0)
        else:
            total += length
    return total


def decoded_bytes(data: bytes) -> int:
    """The bytes the Arrow IPC file ``data`` decodes to (its buffers, uncompressed); NotIpc when
    it is not one."""
    if len(data) < 18 or not data.startswith(MAGIC) or not data.endswith(MAGIC):
        raise NotIpc("no Arrow IPC file magic")
    f = _Flat(data)
    footer_len = f._at("<i", len(data) - 10)
    footer = len(data) - 10 - footer_len
    if footer_len <= 0 or footer < 8:
        raise NotIpc("a footer outside the file")
    ft = _Flat(data[footer : len(data) - 10])
    root = ft.root(0)
    total = 0
    for field in (
        2,
        3,
    ):  # dictionaries, record batches: Block {offset: long, metaDataLength: int, bodyLength: long}
        for blk in ft.vector(root, field, 24):
            total += _batch_bytes(data, ft._at("<q", blk), ft._at("<i", blk + 8))
    return total
