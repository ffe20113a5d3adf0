"""A URL input read in this process (no scheduler): its files copied to a temporary directory
(bounded as ``inputs/urls.py`` says) and read there by the local code; errors name the URL."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from charllm_trace.core.errors import InputError
from charllm_trace.inputs.urls import is_url

_dirs: list[str] = []


def _cleanup() -> None:
    for d in _dirs:
        shutil.rmtree(d, ignore_errors=True)


def localize_input(url: str) -> Path:
    """A local copy of the file or directory (its files, not its subdirectories) at ``url``;
    removed when the process exits."""
    from charllm_trace.inputs import urls

    if not _dirs:
        atexit.register(_cleanup)
    tmp = Path(tempfile.mkdtemp(prefix="charllm-url-"))
    _dirs.append(str(tmp))
    name = url.rstrip("/").rsplit("/", 1)[-1] or "input"
    if urls.url_kind(url) == "file":
        return urls.fetch(url, tmp / name)
    d = tmp / name
    d.mkdir()
    for n, u, _size in urls.list_dir(url):
        urls.fetch(u, d / n)
    return d


@contextmanager
def url_errors(url: str, local: Path) -> Iterator[None]:
    """Errors about files of ``local`` (a copy of ``url``) name the URL's file instead."""
    try:
        yield
    except InputError as exc:
        if exc.path is not None and exc.path.startswith(str(local)):
            rel = exc.path[len(str(local)) :].lstrip("/")
            raise InputError(url.rstrip("/") + ("/" + rel if rel else ""), exc.problem) from None
        raise


@contextmanager
def url_output(output: str) -> Iterator[str]:
    """A local path to write ``output`` to: itself when local; for a URL, a temporary one whose
    files (the path and any beside it with its name as a stem) are uploaded whole afterwards."""
    if not is_url(output):
        yield output
        return
    from charllm_trace.inputs import urls

    base = output.rstrip("/")
    name = base.rsplit("/", 1)[-1]
    # what comes before the name, its slash kept: "s3://b/x/" or, for a name right after the
    # protocol ("memory://out"), "memory://" (stripping that slash made "memory:/out/...", which
    # fsspec took for a local path: the files went to ./memory:/out)
    parent = base[: -len(name)]
    with tempfile.TemporaryDirectory(prefix="charllm-out-") as tmp:
        yield str(Path(tmp) / name)
        for f in sorted(Path(tmp).rglob("*")):
            if f.is_file():
                urls.write_bytes(f"{parent}{f.relative_to(tmp).as_posix()}", f.read_bytes())
