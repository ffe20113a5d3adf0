"""fsspec URLs as inputs and outputs, with the local readers' bounds on the byte stream.

A URL's bytes are copied to a local file (at most ``CHARLLM_TRACE_MAX_INPUT_BYTES`` stored
bytes; a gzip stream is then bounded by the local readers as any file: ``core/files.py``), and the
local code reads that file; errors name the URL. Credentials come from the environment, as
fsspec finds them (``AWS_*``, ``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_*``...).
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import Any

from charllm_trace.core.errors import InputError
from charllm_trace.core.files import head_bytes

CHUNK = 1 << 22
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_url(path: object) -> bool:
    """``s3://``, ``gs://``, ``file://``, ``memory://``...: an fsspec URL, not a local path."""
    return isinstance(path, str) and bool(_URL.match(path))


def fs_of(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:  # pragma: no cover - an optional extra
        raise InputError(url, "reading URLs needs fsspec: pip install 'charllm-trace[scale]'") from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise InputError(url, f"cannot open this URL ({' '.join(str(exc).split())[:200]})") from None


def _why(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]


def url_kind(url: str) -> str:
    """ "dir" or "file"; InputError when the URL cannot be reached or holds nothing."""
    fs, p = fs_of(url)
    try:
        if fs.isdir(p):
            return "dir"
        if fs.isfile(p):
            return "file"
    except Exception as exc:  # noqa: BLE001 - any backend's failure is the URL's one-line error
        raise InputError(url, f"cannot reach it ({_why(exc)})") from None
    raise InputError(url, "no such file or directory")


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def list_dir(url: str) -> list[tuple[str, str, int]]:
    """(name, URL, size) of the files directly in directory ``url``, sorted by name."""
    fs, p = fs_of(url)
    try:
        entries = fs.ls(p, detail=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(url, f"cannot list it ({_why(exc)})") from None
    out = []
    for e in entries:
        name = str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
        if e.get("type") == "file" and not name.startswith("."):
            out.append((name, join(url, name), int(e.get("size") or 0)))
    return sorted(out)


def peek(url: str, n: int) -> bytes:
    """The first ``n`` bytes of ``url``, decompressed when it is gzip."""
    fs, p = fs_of(url)
    try:
        with _io_of(fs, p) if _in_memory(fs) else fs.open(p, "rb") as fh:
            return head_bytes(fh, n)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(url, f"cannot read (corrupt or truncated gzip?): {exc}") from None
    except Exception as exc:  # noqa: BLE001
        raise InputError(url, f"cannot read it ({_why(exc)})") from None


def _io_of(fs: Any, path: str) -> Any:
    import io

    return io.BytesIO(fs.cat_file(path))  # a memory:// file: already in memory


def fetch(url: str, dest: Path) -> Path:
    """Copy ``url`` to the local file ``dest`` (at most the input limit of stored bytes)."""
    from charllm_trace.core.limits import max_input_bytes

    limit = max_input_bytes()
    fs, p = fs_of(url)
    n = 0
    try:
        with _reader(fs, p) as src, open(dest, "wb") as out:
            while chunk := src.read(CHUNK):
                n += len(chunk)
                if n > limit:  # stored bytes (a gzip is bounded again when it is decompressed)
                    raise InputError(
                        url,
                        f"holds more than {limit:,} bytes, the limit for one input "
                        "(CHARLLM_TRACE_MAX_INPUT_BYTES raises it for a real trace)",
                    )
                out.write(chunk)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise InputError(url, f"cannot read it ({_why(exc)})") from None
    return dest


class _Ranges:
    """Reads by byte ranges (``cat_file``): fsspec's memory filesystem hands every opener the same
    file object, so two threads reading one file through ``open`` would share its position."""

    def __init__(self, fs: Any, path: str) -> None:
        self.fs, self.path, self.pos = fs, path, 0

    def read(self, n: int) -> bytes:
        data = self.fs.cat_file(self.path, start=self.pos, end=self.pos + n)
        self.pos += len(data)
        return data

    def __enter__(self) -> _Ranges:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _in_memory(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "memory" in protocols


def _reader(fs: Any, path: str) -> Any:
    return _Ranges(fs, path) if _in_memory(fs) else fs.open(path, "rb")


def write_bytes(url: str, data: bytes) -> None:
    """Write ``data`` to ``url`` whole: to a temporary name beside it, then moved into place."""
    fs, p = fs_of(url)
    parent, name = p.rsplit("/", 1) if "/" in p else ("", p)
    tmp = f"{parent}/.{name}.partial-{os.getpid()}" if parent else f".{name}.partial-{os.getpid()}"
    try:
        if parent:
            fs.makedirs(parent, exist_ok=True)
        with fs.open(tmp, "wb") as f:
            f.write(data)
        fs.mv(tmp, p)
    except Exception as exc:  # noqa: BLE001
        try:
            fs.rm(tmp)
        except Exception:  # noqa: BLE001
            pass
        raise InputError(url, f"cannot write it ({_why(exc)})") from None


def exists(url: str) -> bool:
    fs, p = fs_of(url)
    try:
        return bool(fs.exists(p))
    except Exception:  # noqa: BLE001
        return False


def rename(src: str, dst: str) -> None:
    fs, s = fs_of(src)
    _, d = fs_of(dst)
    fs.mv(s, d)


def remove(url: str) -> None:
    fs, p = fs_of(url)
    try:
        fs.rm(p)
    except Exception:  # noqa: BLE001 - cleaning up after a failure: best effort
        pass


def makedirs(url: str) -> None:
    fs, p = fs_of(url)
    try:
        fs.makedirs(p, exist_ok=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(url, f"cannot create it ({_why(exc)})") from None
