"""Which files in the cache directory this tool wrote: a marker it writes, never a name alone.

``CHARLLM_TRACE_CACHE_DIR`` may point at a folder of the user's, and a file of theirs may be named
like an entry (64 hex digits) or a temporary (``.<16 hex>-...``). Before ``cache clear``, the size
cap or a damaged-entry clean-up deletes anything, it checks the thing holds this tool's marker:

- a directory entry or its temporary: the file ``.charllm-trace-entry`` with :data:`DIR_MARK`,
  written into the directory before anything else (entries of earlier releases: a ``meta.json``
  sealed by the cache, with its CRC, naming the entry's kind);
- an index record (``et-index``, ``file-index``): :data:`INDEX_HEAD` then the key (records of
  earlier releases: exactly 64 hex digits);
- a saved-results entry: a zip whose first member is ``charllm-results.json``;
- a compare row: JSON starting with :data:`ROW_MARK`;
- a printed output (``store/output_cache.py``): :data:`OUTPUT_HEAD` first.

Symbolic links are never ours (the cache writes none). Anything else is left where it is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MARK_FILE = ".charllm-trace-entry"
DIR_MARK = b"charllm-trace cache entry\n"
INDEX_HEAD = "charllm-trace cache index\n"
ROW_MARK = b'{"_written_by": "charllm-trace compare"'
ROW_KEY = "_written_by"
RESULTS_HEAD = b"PK\x03\x04"
RESULTS_FIRST = b"charllm-results.json"
OUTPUT_HEAD = b"charllm-trace output 1 "  # output_cache.HEAD
_HEX64 = re.compile(rb"^[0-9a-f]{64}$")


def mark_dir(d: Path) -> None:
    """Write the marker into a directory the cache just made (before any other file)."""
    (d / MARK_FILE).write_bytes(DIR_MARK)


def index_text(key: str) -> str:
    return INDEX_HEAD + key


def read_index(p: Path) -> str | None:
    """The key an index record holds (this release's or an earlier one's), None when it holds none."""
    try:
        raw = p.read_bytes()[:256]
    except OSError:
        return None
    key = raw[len(INDEX_HEAD) :] if raw.startswith(INDEX_HEAD.encode()) else raw
    key = key.strip()
    return key.decode() if _HEX64.match(key) else None


def _head(p: Path, n: int) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _dir_owned(p: Path, kind: str) -> bool:
    if _head(p / MARK_FILE, 64) == DIR_MARK:
        return True
    meta = p / "meta.json"
    try:
        if meta.is_symlink() or not meta.is_file() or meta.stat().st_size > 64 << 20:
            return False
        from charllm_trace.et._colcache import unseal

        body = unseal(meta.read_bytes(), "meta.json")
    except Exception:  # noqa: BLE001 - whatever it is, it is not a sealed entry of ours
        return False
    return isinstance(body, dict) and body.get("kind") == kind and "format" in body


def _file_owned(p: Path, kind: str) -> bool:
    if kind == "results":
        head = _head(p, 30 + len(RESULTS_FIRST))
        return head[:4] == RESULTS_HEAD and head[30:] == RESULTS_FIRST
    if kind == "compare":
        return _head(p, len(ROW_MARK)) == ROW_MARK
    if kind == "outputs":
        return _head(p, len(OUTPUT_HEAD)) == OUTPUT_HEAD
    if kind in ("et-index", "file-index"):
        return read_index(p) is not None
    return False


def owned(p: Path, kind: str) -> bool:
    """Whether ``p`` (an item under the cache's ``kind`` folder) carries this tool's marker."""
    try:
        if p.is_symlink():
            return False
        if p.is_dir():
            return _dir_owned(p, kind)
        return os.path.isfile(p) and _file_owned(p, kind)
    except OSError:
        return False
