"""Reading a cache entry, and writing one whole or not at all (the stores' one way to replace a
file)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def replace_file(entry: Path, key: str, parts: Iterable[bytes]) -> None:
    """Write ``parts`` to a new file beside ``entry`` (named after ``key``) and rename it over
    ``entry``: a reader sees the old entry or the new one, never half of one. The new file is
    removed if anything fails; the error is raised."""
    import tempfile  # here, on a miss: its import (shutil, random, bz2, lzma) is ~10 ms of a hit

    fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", dir=entry.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, entry)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_entry(entry: Path) -> bytes | None:
    """The bytes of ``entry``; None when it cannot be read (not stored, gone, unreadable)."""
    try:
        return entry.read_bytes()
    except OSError:
        return None
