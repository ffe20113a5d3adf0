"""Open whatever the user points at as a Run.

Accepted inputs:
- a Chakra ET file (``.et``, ``.et.gz``, or any file whose bytes are a Chakra ET);
- a directory of per-rank Chakra ETs;
- a collected run directory (host ETs + Kineto profiles + telemetry + manifest),
  converted in memory;
- a Kineto profile (``.json`` / ``.json.gz``), converted in memory.

Decoded ETs and converted JSON files and run directories are cached by content
(``charllm_trace/et/cache.py``, docs/cache.md): a second load of the same input maps the
stored tables instead of converting again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run

ET_SUFFIXES = (".et", ".et.gz")
JSON_SUFFIXES = (".json", ".json.gz")


def is_et_name(p: Path) -> bool:
    return p.name.lower().endswith(ET_SUFFIXES)


def is_json_name(p: Path) -> bool:
    return p.name.lower().endswith(JSON_SUFFIXES)


def _cached_convert(kind: str, p: Path, convert: Callable[[Path], Run], only: list[int] | None = None) -> Run:
    """``convert(p)``, or its cached result (``kind``: "kineto" for a file, "run" for a directory;
    ``only``: the ranks converted, part of the key)."""
    import hashlib

    from charllm_trace.et import cache as et_cache

    try:
        key = et_cache.json_key(p) if kind == "kineto" else et_cache.run_key(p)
    except OSError:
        return convert(p)  # unreadable files: the converter words the error
    if only is not None:
        key = hashlib.sha256(f"{key}|only={','.join(map(str, only))}".encode()).hexdigest()
    hit = et_cache.lookup_run(kind, key, str(p))
    if hit is not None:
        traces, manifest = hit
        return Run(traces=traces, manifest=manifest, source=str(p))
    run = convert(p)
    et_cache.store_run(kind, key, run.traces, run.manifest, str(p))
    return run


def load(
    path: str | os.PathLike[str],
    *,
    cache: bool | None = None,
    ranks: list[int] | None = None,
    sample: int | None = None,
) -> Run:
    """Load ``path`` into a :class:`Run`. Raises :class:`InputError` for bad input, and for a
    directory whose run is incomplete unless partial runs are allowed (:mod:`run_checks`).

    ``ranks`` / ``sample``: just these ranks (``--ranks``), then an even sample of N of them
    (``--sample``, ``limits.sample_ranks``). In a directory the ranks are told from the file names
    and first bytes, and only the chosen ranks' files are read and converted."""
    from charllm_trace.collectors.run_checks import label_partial
    from charllm_trace.core.limits import choose_ranks
    from charllm_trace.inputs.urls import is_url

    if is_url(path):  # read here from a local copy (with --scheduler, workers read URLs themselves)
        from charllm_trace.inputs.localize import localize_input, url_errors

        url = str(path)
        local = localize_input(url)
        with url_errors(url, local):
            run = load(local, cache=False, ranks=ranks, sample=sample)
        run.source = url
        return run
    present = dir_ranks(path) if (ranks is not None or sample is not None) else None
    if present is not None:
        try:
            only = choose_ranks(present, ranks, sample)
        except InputError as exc:
            raise InputError(path, exc.problem) from None
        run = _load(path, cache=cache, only=only)
        label_partial(run, path, present=present)
        return run
    run = _load(path, cache=cache)
    if os.path.isdir(path):
        label_partial(run, path)
    if ranks is not None or sample is not None:
        try:
            run = run.select(choose_ranks(run.ranks, ranks, sample) or run.ranks)
        except InputError as exc:
            raise InputError(path, exc.problem) from None
    return run


def dir_ranks(path: str | os.PathLike[str]) -> list[int] | None:
    """The ranks of a directory told without reading its files whole: a run directory's files
    paired by rank (their names and first bytes), or per-rank ETs by their names; None when that
    cannot tell (not a directory; an ET without a rank in its name)."""
    from charllm_trace.core.files import path_kind, trace_entries

    p = Path(path)
    if path_kind(p) != "dir":
        return None
    if trace_entries(p, ET_SUFFIXES):
        from charllm_trace.et.reader import et_files, rank_from_name

        named = [rank_from_name(f.name) for f in et_files(p)]
        return None if any(r is None for r in named) else sorted({r for r in named if r is not None})
    if trace_entries(p, JSON_SUFFIXES):
        from charllm_trace.converters.run_dir import pair_files

        return [j.rank for j in pair_files(p)]
    return None


def _load(path: str | os.PathLike[str], *, cache: bool | None = None, only: list[int] | None = None) -> Run:
    """Load ``path`` into a :class:`Run`. Raises :class:`InputError` for bad input.

    ``cache``: use the cache of decoded/converted inputs (default: unless turned off for the
    process, ``charllm_trace.et.cache.set_enabled(False)`` or ``CHARLLM_TRACE_NO_CACHE=1``)."""
    if cache is None:
        from charllm_trace.et.cache import enabled

        cache = enabled()
    from charllm_trace.core.files import open_regular, path_kind

    p = Path(path)
    if path_kind(p) == "dir":
        entries = [e for e in p.iterdir() if not e.name.startswith(".")]
        if not entries:
            raise InputError(p, "directory is empty")
        from charllm_trace.core.files import trace_entries

        if trace_entries(p, ET_SUFFIXES):
            from charllm_trace.et.reader import read_et_dir

            return read_et_dir(p, cache=cache, only=only)
        if trace_entries(p, JSON_SUFFIXES):
            from functools import partial

            from charllm_trace.converters.run_dir import convert_run

            conv = partial(convert_run, only=only)
            return _cached_convert("run", p, conv, only) if cache else conv(p)
        raise InputError(p, "no Chakra ET (.et) files, Kineto profiles or run directory found here")
    with open_regular(p, "a trace file or a directory") as f:
        head = f.read(4)
        if not head:
            raise InputError(p, "file is empty")
        if head == b"PK\x03\x04":  # a zip: what `analyze --save` writes (store/results.py)
            raise InputError(
                p,
                "a zip file, not a trace: charllm-trace results (analyze --save) are read by "
                "'analyze' and 'report'; the other commands need the trace itself",
            )
    if is_json_name(p):
        from charllm_trace.converters.run_dir import convert_file

        return _cached_convert("kineto", p, convert_file) if cache else convert_file(p)
    from charllm_trace.et.reader import read_et

    trace = read_et(p, cache=cache)
    return Run.single(trace, source=str(p))
