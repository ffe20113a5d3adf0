"""Bytes the driver keeps on its own disk instead of in its memory (issue 26 item 3: a driver
that does not grow with ranks): appended to one temporary file, read back by (offset, length).
The walk's op names (``engine/graph_step.py``) and the gathered ranks' parts
(``engine/compact.HeldParts``) wait here until the merge reads them, a batch at a time.

A temporary file rather than a spill location: it is the driver's alone (never read by a
worker), it needs no name, and the system removes it when the process ends, however it ends.
"""

from __future__ import annotations

import tempfile

#: a place on the shelf: (offset, length)
Ref = tuple[int, int]


class Shelf:
    """An append-only store of byte strings in a temporary file of this process."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(prefix="charllm-trace-shelf-")  # noqa: SIM115 - closed by close()
        self.end = 0

    def __enter__(self) -> Shelf:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.file.close()

    def put(self, data: bytes) -> Ref:
        """Store ``data``; where it is."""
        self.file.seek(self.end)
        self.file.write(data)
        at, self.end = self.end, self.end + len(data)
        return at, len(data)

    def get(self, ref: Ref) -> bytes:
        """The bytes stored at ``ref``."""
        self.file.seek(ref[0])
        data = self.file.read(ref[1])
        if len(data) != ref[1]:
            raise OSError(f"temporary file: {ref[1]} bytes expected at offset {ref[0]}, {len(data)} read")
        return data
