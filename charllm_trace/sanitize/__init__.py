"""Remove private information from a run before it is shared.

``sanitize_run(src, dst)`` writes a cleaned copy of a run directory (or of one file)
and never touches the input. What it does to every file (see ``docs/sharing.md``):

- **environment**: any mapping stored under ``env`` / ``environ`` / ``environment``
  (and similar keys, :data:`DROP_KEYS`) is dropped whole;
- **host names**: every value under a host key (``hostname``, ``hostnames``, ``host``,
  ``nodename``, ``master_addr`` ...) is replaced by a pseudonym ``host0``, ``host1`` ...
  (the same host gets the same pseudonym in every file, so which ranks share a node is
  kept), and every other occurrence of those names (and of their short forms) in any
  string is replaced too;
- **user names**: values under user keys (``user``, ``username``, ``started_by`` ...) and
  their occurrences in any string become ``user``;
- **file paths**: absolute paths, ``~/``, ``./`` and ``../`` paths, ``file://`` URIs,
  Windows paths and relative paths ending in a source/data file name become ``<path>``;
  Kineto's ``traceName`` (the profile's own path) and ``INFO`` log lines are dropped;
- **network endpoints**: rendezvous options (``--master_addr``, ``--rdzv_endpoint`` ...)
  and IPv4 addresses become host pseudonyms (ports kept);
- **process and thread ids** (``pid``, ``tid``, ``launcher_pid`` ..., ``thread N`` in
  strings) are remapped in order to ``ID_BASE + i``, one map for the run;
- **Python stack frames**: the ``Call stack``, ``Python id``, ``Python parent id``,
  ``Python module id`` args and stack attributes of Chakra ET nodes are dropped; Kineto
  ``python_function`` events are kept (they decide which CPU ops are leaves) without paths;
- **hardware names** (``deviceProperties``, ``devices``, ``gpus`` ...) are never rewritten;
- extra words given with ``redact=`` are replaced by ``<redacted>`` everywhere.

Everything else (timestamps, ids, names of operators and kernels, collective args,
process-group configs, device properties, telemetry values) is kept as is, so every
analysis gives the same numbers before and after.

Files handled: JSON (``.json``, ``.json.gz``: manifests, host execution traces, Kineto
profiles), line-delimited JSON (``.jsonl``, ``.ndjson``, optionally ``.gz``), CSV,
Parquet and Arrow IPC tables, and Chakra ET protobuf files (``.et``, ``.et.gz``). Any
other file is left out of the output and listed in the report: copying it unread could
leak what it holds. After writing, every output file is read back (decompressed) and
checked to hold none of the removed host names, user names, redacted words or paths.

Modules: :mod:`~charllm_trace.sanitize.rules` (what is private and what replaces it),
:mod:`~charllm_trace.sanitize.formats` (each file format; Chakra ET files in
:mod:`~charllm_trace.sanitize.chakra_et`); this module copies a run through them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from charllm_trace.core.alloc import gc_paused
from charllm_trace.core.errors import InputError
from charllm_trace.sanitize import formats
from charllm_trace.sanitize.rules import (
    DROP_KEYS,
    HOST_ENV,
    HOST_KEYS,
    HW_KEYS,
    ID_KEYS,
    KINETO_DROP,
    PATH_TOKEN,
    PY_CATS,
    REDACT_TOKEN,
    USER_ENV,
    USER_KEYS,
    USER_TOKEN,
    SanitizeReport,
    Scrubber,
    scrub_name,
)

__all__ = [
    "DROP_KEYS",
    "HOST_ENV",
    "HOST_KEYS",
    "HW_KEYS",
    "ID_KEYS",
    "KINETO_DROP",
    "PATH_TOKEN",
    "PY_CATS",
    "REDACT_TOKEN",
    "USER_ENV",
    "USER_KEYS",
    "USER_TOKEN",
    "SanitizeReport",
    "sanitize_run",
]

_BIG = 64 << 20  # bytes: JSON files at least this big are parsed once only
#: Written into every sanitized directory: ``--force`` replaces only a directory holding it.
MARKER = ".charllm-trace-sanitized"
_MARKER_TEXT = b"written by charllm-trace sanitize; --force may replace this directory\n"


def _files(src: Path) -> list[Path]:
    if src.is_file():
        return [src]
    # symbolic links are listed too, and left out: their target may lie outside the run; so are
    # FIFOs, sockets and devices (never opened: reading a FIFO blocks)
    return sorted(
        p
        for p in src.rglob("*")
        if (p.is_symlink() or not p.is_dir()) and not (p.name == MARKER and p.parent == src)
    )


def _check_place(d: Path) -> None:
    """The output's nearest existing ancestor must be a directory we may write in (checked
    before any input is read)."""
    p = d.parent
    while not p.exists() and p != p.parent:
        if p.is_symlink():
            raise InputError(d, f"{p} is a dangling symbolic link")
        p = p.parent
    if not p.is_dir():
        raise InputError(d, f"cannot write here: {p} is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise InputError(d, f"cannot write here: no permission to write in {p}")


def _check_replaceable(s: Path, d: Path) -> None:
    """``--force`` replaces only what sanitize itself wrote: a directory with its marker file
    (for a directory input) or a regular file of the same kind (for a file input)."""
    if d.is_symlink():
        raise InputError(d, "is a symbolic link; --force replaces only an output sanitize wrote itself")
    if s.is_dir():
        if not d.is_dir() or not (d / MARKER).is_file() or (d / MARKER).read_bytes() != _MARKER_TEXT:
            raise InputError(
                d, f"exists and was not written by sanitize (no {MARKER} marker); --force does not replace it"
            )
    elif not d.is_file() or formats.kind_of(d.name) != formats.kind_of(s.name):
        raise InputError(d, "exists and is not a file of the same kind; --force does not replace it")


def sanitize_run(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    force: bool = False,
    redact: Iterable[str] = (),
) -> SanitizeReport:
    """Write a sanitized copy of run directory (or file) ``src`` to ``dst``.

    ``dst`` must not exist unless ``force``: then it is replaced whole, after the new copy
    was written, but only if sanitize wrote it (a directory with the :data:`MARKER` file, or
    a file of the same kind for a file input); anything else is refused. ``src`` is only read. Raises :class:`InputError` for bad input.
    """
    s = Path(src)
    d = Path(dst)
    _check_paths(s, d, force)
    files = _files(s)
    if not files:
        raise InputError(s, "directory is empty")
    sc = Scrubber(redact)
    kinds = {f: (formats.kind_of(f.name) if f.is_file() and not f.is_symlink() else None) for f in files}
    datas = _learn_names(sc, kinds)
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}.", dir=d.parent))
    except OSError as exc:
        raise InputError(d, f"cannot write here ({exc.strerror or exc})") from None
    try:
        known = (len(sc.hosts), len(sc.users), len(sc.ids))
        _write_all(sc, s, d, kinds, datas, tmp, keep=True)
        if (len(sc.hosts), len(sc.users), len(sc.ids)) != known:
            # a big file named a host, user or process id that files written before it may hold: once more
            shutil.rmtree(tmp)
            tmp.mkdir()
            _write_all(sc, s, d, kinds, datas, tmp, keep=False)
        datas.clear()
        _self_check(sc, s, d, tmp)
        _put_in_place(s, d, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    r = sc.report
    r.hosts = len(set(sc.hosts.values()))
    r.users = len(sc.users)
    r.paths_replaced = len(sc.paths)
    r.ids = len(sc.ids)
    r.host_map = {v: v for v in sorted(set(sc.hosts.values()))}
    return r


def _check_paths(s: Path, d: Path, force: bool) -> None:
    """The input is a file or a directory, the output lies outside it and may be written."""
    from charllm_trace.core.files import path_kind

    path_kind(s)  # a regular file or a directory; anything else (FIFO, dangling link ...) refused
    rs, rd = s.resolve(), d.resolve()
    if rs == rd or rd in rs.parents or (s.is_dir() and rs in rd.parents):
        raise InputError(d, "output must be outside the input (the input is never modified)")
    if d.exists() or d.is_symlink():
        if not force:
            raise InputError(d, "already exists; pass --force to replace it")
        _check_replaceable(s, d)
    _check_place(d)


def _learn_names(sc: Scrubber, kinds: dict[Path, str | None]) -> dict[Path, bytes]:
    """Pass 1: learn the host and user names from every file's headers. Big JSON files (profiles)
    are parsed once, in pass 2, which learns their headers' names before cleaning them. Returns
    the small JSON files' bytes, kept for pass 2."""
    datas: dict[Path, bytes] = {}
    for f, kind in kinds.items():
        if kind is None:
            continue
        if kind == "json" and f.stat().st_size >= _BIG:
            continue
        data = formats.read(f)
        if kind == "json" and len(data) < 1 << 22:  # small headers (manifest, metadata) are kept for pass 2
            datas[f] = data
        formats.collect(sc, kind, f, data)
    return datas


def _write_all(
    sc: Scrubber,
    s: Path,
    d: Path,
    kinds: dict[Path, str | None],
    datas: dict[Path, bytes],
    tmp: Path,
    keep: bool,
) -> None:
    """Pass 2: cleaned copies of every file into ``tmp``."""
    sc.report = SanitizeReport()
    for f, kind in kinds.items():
        rel = f.name if s.is_file() else f.relative_to(s).as_posix()
        if kind is None:
            sc.report.left_out.append(rel)
            continue
        data = datas.get(f) if keep else datas.pop(f, None)
        if data is None:
            data = formats.read(f)
        gz = f.name.lower().endswith(".gz")
        out = formats.clean(sc, kind, f, data)
        del data
        new_rel = scrub_name(sc, rel)
        sc.report.renamed += new_rel != rel
        target = tmp / ("out" if s.is_file() else new_rel)
        formats.write(target, out, gz)
        sc.report.written.append(d.name if s.is_file() else new_rel)


def _self_check(sc: Scrubber, s: Path, d: Path, tmp: Path) -> None:
    """Read everything back: nothing removed may remain, in names or bytes."""
    for p in sorted(tmp.rglob("*")):
        if p.is_file():
            data = formats.read(p)
            left = sc.leftovers(data) + sc.leftovers(p.relative_to(tmp).as_posix().encode())
            if sc.ids and len(data) < _BIG and formats.kind_of(d.name if s.is_file() else p.name) == "json":
                with gc_paused():
                    left += [str(i) for i in sc.leaked_ids(formats.load_json(p, data))]  # ids under id keys
            del data
            if left:
                raise RuntimeError(
                    f"sanitize self-check failed: {p.relative_to(tmp)} still holds {len(left)} removed strings"
                )


def _put_in_place(s: Path, d: Path, tmp: Path) -> None:
    """Replace ``d`` (checked again: it may have changed while we worked) by the written copy."""
    if d.exists() or d.is_symlink():
        _check_replaceable(s, d)
        if d.is_dir():
            shutil.rmtree(d)
        else:
            d.unlink()
    if s.is_dir():
        (tmp / MARKER).write_bytes(_MARKER_TEXT)
    if s.is_file():
        (tmp / "out").rename(d)
        tmp.rmdir()
    else:
        tmp.rename(d)
