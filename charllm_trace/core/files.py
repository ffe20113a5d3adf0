"""Opening files a user gave us, which may come from anyone (issue 15: untrusted inputs).

Every reader opens its input through here:

* :func:`regular_file` / :func:`open_regular` refuse, with one line naming the path, anything that
  is not a readable regular file: a missing path, a dangling symbolic link, a loop of links, a
  directory, a FIFO, a socket or a device. A FIFO is never opened blocking: the file is opened with
  ``O_NONBLOCK`` and checked with ``fstat`` on the descriptor itself (no window between the check
  and the open), so a named pipe nobody writes to cannot hang a command.
* :func:`gunzip` / :class:`BoundedGzip` decompress gzip a chunk at a time and stop with one line
  once more than :func:`charllm_trace.core.limits.max_input_bytes` would come out (a 4 MB file of
  compressed zeros is refused after the limit, not after 4 GB are in memory).
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from charllm_trace.core.errors import InputError
from charllm_trace.core.limits import gzip_out_limit, max_input_bytes

GZIP_MAGIC = b"\x1f\x8b"

_KINDS = (
    (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file"),
    (stat.S_ISSOCK, "is a socket, not a regular file"),
    (stat.S_ISCHR, "is a character device, not a regular file"),
    (stat.S_ISBLK, "is a block device, not a regular file"),
)


def _why_not_regular(mode: int, what: str) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return f"is a directory, expected {what}"
    for test, why in _KINDS:
        if test(mode):
            return why
    return "is not a regular file"


def _missing(p: Path) -> InputError:
    """The error for a path ``stat`` could not find: a dangling link, or nothing at all."""
    try:
        if stat.S_ISLNK(os.lstat(p).st_mode):
            return InputError(p, f"is a dangling symbolic link (to {os.readlink(p)!r})")
    except OSError:
        pass
    return InputError(p, "no such file or directory")


def _os_error(p: Path, exc: OSError) -> InputError:
    if exc.errno == errno.ENOENT:
        return _missing(p)
    if exc.errno == errno.ELOOP:
        return InputError(p, "is a loop of symbolic links")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return InputError(p, "file is not readable (permission denied)")
    if exc.errno == errno.ENAMETOOLONG:
        return InputError(p, "the path is too long")
    if exc.errno == errno.ENOTDIR:
        return InputError(p, "a part of the path is a file, not a directory")
    return InputError(p, f"cannot read the file ({exc.strerror or exc})")


def regular_file(path: str | os.PathLike[str], what: str = "a file") -> os.stat_result:
    """``stat`` of ``path`` (links followed) when it is a regular file; ``InputError`` otherwise."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise _os_error(p, exc) from None
    except ValueError:  # an embedded NUL byte
        raise InputError(p, "the path holds a NUL byte") from None
    why = _why_not_regular(st.st_mode, what)
    if why:
        raise InputError(p, why)
    return st


def path_kind(path: str | os.PathLike[str]) -> str:
    """``"dir"`` or ``"file"`` for an existing directory or regular file (links followed);
    ``InputError`` for anything else (missing, dangling link, link loop, FIFO, device ...)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise _os_error(p, exc) from None
    except ValueError:
        raise InputError(p, "the path holds a NUL byte") from None
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    why = _why_not_regular(st.st_mode, "a file")
    if why:
        raise InputError(p, why)
    return "file"


def trace_entries(d: str | os.PathLike[str], suffixes: tuple[str, ...]) -> list[Path]:
    """The visible entries of directory ``d`` named ``*<suffix>`` (case-insensitive), sorted; each
    must be a regular file (links followed): a FIFO, a dangling link, a loop or a directory with
    such a name is an ``InputError`` naming it, never skipped (a run would silently lose a rank)."""
    out = []
    for e in sorted(Path(d).iterdir()):
        if e.name.startswith(".") or not e.name.lower().endswith(suffixes):
            continue
        if path_kind(e) == "dir":
            raise InputError(e, "is a directory named like a trace file")
        out.append(e)
    return out


def open_regular(path: str | os.PathLike[str], what: str = "a file") -> BinaryIO:
    """``path`` opened for binary reading when it is a readable regular file.

    Opened non-blocking and checked on the descriptor, so a FIFO is refused without waiting for a
    writer; the returned file object reads normally (blocking)."""
    import fcntl

    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise InputError(p, f"is a directory, expected {what}") from None
        raise _os_error(p, exc) from None
    except ValueError:
        raise InputError(p, "the path holds a NUL byte") from None
    try:
        why = _why_not_regular(os.fstat(fd).st_mode, what)
        if why:
            raise InputError(p, why)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], what: str = "a file") -> bytes:
    """All bytes of the regular file ``path`` (as stored: no decompression)."""
    p = Path(path)
    with open_regular(p, what) as fh:
        try:
            return fh.read()
        except OSError as exc:
            raise _os_error(p, exc) from None


def head_bytes(fh: BinaryIO, n: int) -> bytes:
    """The first ``n`` bytes of the file ``fh`` (open at its start), decompressed when they are
    gzip (known by the magic number)."""
    head = fh.read(2)
    fh.seek(0)
    if head == GZIP_MAGIC:
        with gzip.open(fh) as g:
            return g.read(n)
    return fh.read(n)


def read_maybe_gzipped(
    path: str | os.PathLike[str], what: str, check_head: Callable[[bytes], None], empty_gzip: str
) -> bytes:
    """The bytes of the regular file ``path``, decompressed when they are gzip (known by the magic
    number, not the name; :func:`gunzip`, ``check_head`` seeing the first bytes out). An empty
    file is refused, and an empty decompressed one with the message ``empty_gzip``."""
    p = Path(path)
    data = read_regular(p, what)
    if not data:
        raise InputError(p, "file is empty")
    if data[:2] == GZIP_MAGIC:
        data = gunzip(data, p, check_head=check_head)
        if not data:
            raise InputError(p, empty_gzip)
    return data


def too_big(path: str | os.PathLike[str], limit: int) -> InputError:
    return InputError(
        path,
        f"decompresses to more than {limit:,} bytes, the limit for this input: refused as a gzip "
        "bomb (CHARLLM_TRACE_MAX_GZIP_RATIO or CHARLLM_TRACE_MAX_INPUT_BYTES raise it for a real trace)",
    )


def gunzip(
    data: bytes,
    path: str | os.PathLike[str],
    limit: int | None = None,
    check_head: Callable[[bytes], None] | None = None,
) -> bytes:
    """``data`` (one or more gzip members) decompressed, refusing more than ``limit`` bytes out
    (default :func:`~charllm_trace.core.limits.gzip_out_limit` of the compressed size) before they are
    all in memory. ``check_head`` sees the first 4 KiB out (or all, if less) before the rest is
    decompressed, and may raise ``InputError`` (a bomb of zeros is refused from its start)."""
    limit = gzip_out_limit(len(data)) if limit is None else limit
    out: list[bytes] = []
    total = 0
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            pos = 0
            while not d.eof:
                if d.unconsumed_tail:
                    src = d.unconsumed_tail
                elif pos < len(rest):
                    src = rest[pos : pos + (1 << 20)]
                    pos += len(src)
                else:
                    piece = d.flush(limit - total + 1)
                    total += len(piece)
                    if total > limit:
                        raise too_big(path, limit)
                    out.append(piece)
                    break
                piece = d.decompress(src, 1 << 24)
                total += len(piece)
                if total > limit:
                    raise too_big(path, limit)
                out.append(piece)
                if check_head is not None and (total >= 4096 or d.eof):
                    check_head(b"".join(out)[:4096])
                    check_head = None
            if check_head is not None:
                check_head(b"".join(out)[:4096])
                check_head = None
            if not d.eof:
                raise InputError(path, "gzip stream is truncated")
            rest = (d.unused_data + rest[pos:]).lstrip(b"\x00")  # zero padding may follow
            if rest and rest[:2] != GZIP_MAGIC:
                raise InputError(path, "gzip stream is corrupt (trailing garbage)")
    except zlib.error as exc:
        raise InputError(path, f"gzip stream is corrupt ({exc})") from None
    return b"".join(out)


class BoundedGzip:
    """A readable stream over a gzip stream that raises ``InputError`` once more than ``limit``
    decompressed bytes have been read from it (wraps ``isal.igzip.IGzipFile`` or ``gzip.GzipFile``)."""

    def __init__(self, inner: BinaryIO, path: str | os.PathLike[str], limit: int | None = None) -> None:
        self._inner = inner
        self._path = path
        if limit is None:
            try:
                limit = gzip_out_limit(os.fstat(inner.fileno()).st_size)
            except (AttributeError, OSError, ValueError):
                limit = max_input_bytes()
        self._limit = limit
        self._read = 0

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        if n is None or n < 0:
            n = self._limit + 1 - self._read
        # never more than one byte past the limit, and at least one (to see whether more follows)
        b = self._inner.read(max(1, min(n, self._limit + 1 - self._read)))
        self._read += len(b)
        if self._read > self._limit:
            raise too_big(self._path, self._limit)
        return b

    def readinto(self, buf: bytearray | memoryview) -> int:
        b = self.read(len(buf))
        buf[: len(b)] = b
        return len(b)

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> BoundedGzip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
