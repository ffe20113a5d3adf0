"""Convert files and run directories into :class:`~charllm_trace.core.model.Run` objects.

A run directory holds, per rank, a Kineto profile and optionally a host execution trace
(``rank-<N>.kineto.json.gz`` + ``rank-<N>.host_et.json.gz`` as ``charllm-trace collect`` writes
them, or any names: ``kineto_rank3.json.gz``, ``worker3...``). Files are classified by content
(a peek at their first bytes), given a rank by ``distributedInfo.rank`` (Kineto) or else by the
number in their name, paired per rank, and converted in parallel worker processes.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charllm_trace.converters._io import kind_of, load_json
from charllm_trace.core.alloc import gc_paused
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run, Trace
from charllm_trace.core.progress import report

PEEK_BYTES = 1 << 16
#: compressed input size from which convert_run uses worker processes by default
PARALLEL_MIN_BYTES = 32 << 20
_RANK_IN_NAME = re.compile(r"(?:rank|worker|rk)[-_]?(\d+)", re.IGNORECASE)
_DIST_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
#: JSON files of a run directory that are not traces.
_NOT_TRACES = re.compile(
    r"^(manifest|sizes)\.json$|\.info\.json$|\.meta\.json$|^node-.*\.json$", re.IGNORECASE
)

Progress = Callable[[int, int, int], None]  # (done, total, rank)


def convert_doc(doc: dict[str, Any], path: str | os.PathLike[str]) -> tuple[Trace, dict[str, Any]]:
    """Convert one loaded JSON document (Kineto profile or host ET) into a Trace and a report."""
    k = kind_of(doc)
    if k == "kineto":
        from charllm_trace.converters.build import kineto_trace
        from charllm_trace.converters.kineto import parse_kineto

        return kineto_trace(parse_kineto(doc, path))
    if k == "host_et":
        from charllm_trace.converters.host_et import host_et_trace, parse_host_et

        return host_et_trace(parse_host_et(doc, path))
    raise InputError(
        path, "JSON is neither a Kineto profile (traceEvents) nor a PyTorch host execution trace (nodes)"
    )


def convert_file(path: str | os.PathLike[str]) -> Run:
    """Convert one Kineto profile or host ET file (``.json`` / ``.json.gz``) into a one-rank Run."""
    p = Path(path)
    size = _size(p)
    report(p.name, 0, size)
    kind, _rank = classify(p)
    if kind == "kineto":
        trace, _report = convert_pair(None, p)
    elif kind == "host_et":
        trace, _report = convert_pair(p, None)
    else:
        with gc_paused():
            trace, _report = convert_doc(load_json(p), p)  # raises the right one-line error
    report(p.name, size, size)
    return Run.single(trace, source=str(p))


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0  # the reader words the error


def convert_pair(
    host_et: str | os.PathLike[str] | None, kineto: str | os.PathLike[str] | None
) -> tuple[Trace, dict[str, Any]]:
    """Convert one rank: a host ET and/or a Kineto profile (at least one). Python's cyclic
    collector is off meanwhile: the decoded documents' containers hold no cycle and, with a big
    heap around them, cost full collections (core/alloc.py ``gc_paused``)."""
    if kineto is None and host_et is None:
        raise ValueError("convert_pair needs at least one file")
    with gc_paused():
        return _convert_pair(host_et, kineto)


def _convert_pair(
    host_et: str | os.PathLike[str] | None, kineto: str | os.PathLike[str] | None
) -> tuple[Trace, dict[str, Any]]:
    if kineto is None:
        return convert_doc(_load_kind(host_et, "host_et"), host_et)  # type: ignore[arg-type]
    from charllm_trace.converters.build import kineto_trace, linked_trace
    from charllm_trace.converters.kineto import read_kineto

    prof = read_kineto(kineto)
    if host_et is None:
        return kineto_trace(prof)
    from charllm_trace.converters.host_et import parse_host_et

    host = parse_host_et(_load_kind(host_et, "host_et"), host_et)
    return linked_trace(host, prof)


def _load_kind(path: Any, want: str) -> dict[str, Any]:
    doc = load_json(path)
    k = kind_of(doc)
    if k != want:
        what = {"kineto": "a Kineto profile", "host_et": "a host execution trace"}
        raise InputError(
            path, f"expected {what[want]}, found {what.get(k, 'neither a Kineto profile nor a host ET')}"
        )
    return doc


# ---------------------------------------------------------------------------
# Run directories
# ---------------------------------------------------------------------------


@dataclass
class RankFiles:
    rank: int
    kineto: Path | None = None
    host_et: Path | None = None


def _peek(p: Path) -> bytes:
    from charllm_trace.core.files import head_bytes, open_regular

    try:
        with open_regular(p, "a trace file") as fh:
            return head_bytes(fh, PEEK_BYTES)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(p, f"cannot read (corrupt or truncated gzip?): {exc}") from None


def classify(p: Path) -> tuple[str, int | None]:
    """("kineto" | "host_et" | "other", rank or None) from the first bytes and the file name."""
    return classify_head(_peek(p), p.name)


def classify_head(head: bytes, name: str) -> tuple[str, int | None]:
    """:func:`classify` of a file whose first (decompressed) bytes are ``head``."""
    m = _RANK_IN_NAME.search(name)
    rank = int(m.group(1)) if m else None
    if b'"traceEvents"' in head:
        d = _DIST_RANK.search(head)
        return "kineto", int(d.group(1)) if d else rank
    if b'"nodes"' in head and (b'"schema"' in head or b'"pid"' in head):
        return "host_et", rank
    if b'"schemaVersion"' in head or b'"deviceProperties"' in head:
        return "kineto", rank  # traceEvents beyond the peek
    return "other", rank


def pair_files(run_dir: str | os.PathLike[str]) -> list[RankFiles]:
    """Pair the Kineto profiles and host ETs of a run directory by rank."""
    from charllm_trace.core.files import trace_entries

    d = Path(run_dir)
    # hidden entries (a half-written temporary) are never traces; every other *.json(.gz) must be
    # a regular file: a FIFO, dangling link or directory named like a rank's file is refused
    files = [e for e in trace_entries(d, (".json", ".json.gz")) if not is_side_file(e.name)]
    return pair_classified(d, [(f, *classify(f)) for f in files])


def is_side_file(name: str) -> bool:
    """A JSON file of a run directory that is not a trace (manifest, rank info, telemetry meta)."""
    return bool(_NOT_TRACES.search(name))


def pair_classified(d: Any, files: list[tuple[Any, str, int | None]]) -> list[RankFiles]:
    """:func:`pair_files` of classified files ``(file, kind, rank)`` (a file: anything with a
    ``name``; the Dask engine passes URLs)."""
    by_rank: dict[int, RankFiles] = {}
    unranked: list[tuple[str, Path]] = []
    for f, kind, rank in files:
        if kind == "other":
            continue
        if rank is None:
            unranked.append((kind, f))
            continue
        rf = by_rank.setdefault(rank, RankFiles(rank))
        prev = getattr(rf, kind)
        if prev is not None:
            raise InputError(
                d, f"two {kind.replace('_', ' ')} files for rank {rank}: {prev.name} and {f.name}"
            )
        setattr(rf, kind, f)
    if unranked:
        if by_rank or len(unranked) > 2 or len({k for k, _ in unranked}) != len(unranked):
            names = ", ".join(f.name for _, f in unranked[:3])
            raise InputError(
                d, f"cannot tell which rank these files belong to (no rank in the name or profile): {names}"
            )
        rf = RankFiles(0)
        for kind, f in unranked:
            setattr(rf, kind, f)
        by_rank[0] = rf
    if not by_rank:
        raise InputError(d, "no Kineto profiles or host execution traces found here")
    only_host = [r for r, f in by_rank.items() if f.kineto is None]
    only_kineto = [r for r, f in by_rank.items() if f.host_et is None]
    if only_host and only_kineto:
        raise InputError(
            d,
            f"files do not pair up: rank(s) {only_host[:4]} have a host ET but no Kineto profile and "
            f"rank(s) {only_kineto[:4]} a Kineto profile but no host ET (by distributedInfo.rank or file name)",
        )
    return [by_rank[r] for r in sorted(by_rank)]


def _convert_rank_job(rank: int, host_et: str | None, kineto: str | None) -> tuple[str, Any, Any]:
    """Worker entry point. Returns ("ok", trace, report) or ("error", path, problem)."""
    try:
        trace, report = convert_pair(host_et, kineto)
    except InputError as exc:
        return "error", exc.path, exc.problem
    if trace.meta.rank is None:
        trace.meta.rank = rank
    return "ok", trace, report


def attach_run_facts(run_dir: Path, traces: dict[int, Trace], manifest: dict[str, Any]) -> None:
    """Telemetry and host/device facts from a collected run (manifest, rank info, telemetry files)."""
    if manifest:
        ws = manifest.get("world_size")
        for t in traces.values():
            if t.meta.world_size is None and isinstance(ws, int):
                t.meta.world_size = ws
    if not any(run_dir.glob("telemetry-*.meta.json")) and not any(run_dir.glob("rank-*.info.json")):
        return
    from charllm_trace.collectors.telemetry.reader import (
        imported_sources,
        rank_devices,
        read_telemetry,
        telemetry_for_rank,
    )

    devices = rank_devices(run_dir)
    tel = read_telemetry(run_dir) if any(run_dir.glob("telemetry-*.meta.json")) else None
    imported = imported_sources(run_dir) if tel is not None else {}
    for rank, t in traces.items():
        host, idx = devices.get(rank, (None, None))
        if host is not None and t.meta.hostname is None:
            t.meta.hostname = host
        if idx is not None:
            t.meta.device_index = idx
        if tel is not None:
            t.telemetry = telemetry_for_rank(run_dir, rank, tel)
            if host in imported and t.telemetry.height:  # where the samples came from, for the notes
                t.meta.extra = {**t.meta.extra, "telemetry_source": imported[host]}


def convert_run(
    run_dir: str | os.PathLike[str],
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    only: Collection[int] | None = None,
) -> Run:
    """Convert every rank of a run directory, in parallel worker processes (``workers``: default
    the number of CPUs, at most the number of ranks; 1 converts in this process). ``only``: convert
    just these ranks (``--ranks`` / ``--sample``); the other ranks' files are paired by their first
    bytes and names but never read whole."""
    from charllm_trace.core.files import path_kind

    d = Path(run_dir)
    if path_kind(d) != "dir":
        raise InputError(d, "is not a directory")
    manifest = read_manifest(d)
    from charllm_trace.collectors.outcome import check_one_run, reader_note

    check_one_run(d, manifest)  # files of two runs (by run id) are refused
    jobs = pair_files(d)
    if only is not None:
        keep = set(only)
        jobs = [j for j in jobs if j.rank in keep]
    results = _convert_jobs(jobs, workers, progress)
    traces = _traces_by_rank(d, results)
    attach_run_facts(d, traces, manifest)
    from charllm_trace.collectors.run_checks import check_one_collection

    check_one_collection(d, traces)
    partial = [j.rank for j in jobs if j.kineto is None or j.host_et is None]
    note = reader_note(d, manifest, sorted(traces), partial)
    if note:  # an interrupted or failed run: what happened and what is usable, kept with the run
        # (a cached conversion too): run_checks.label_partial prints it on every read
        manifest = {**manifest, "reader_note": note}
    sizes = {t.meta.world_size for t in traces.values() if t.meta.world_size is not None}
    if len(sizes) > 1:
        raise InputError(d, f"ranks disagree on the world size ({sorted(sizes)}): files from different runs?")
    return Run(traces=traces, manifest=manifest, source=str(d))


def _convert_jobs(
    jobs: list[RankFiles], workers: int | None, progress: Progress | None
) -> dict[int, tuple[Trace, dict[str, Any]]]:
    """Each rank's trace and report, converted here or in worker processes (``convert_run``)."""
    n = len(jobs)
    job_bytes = {j.rank: sum(_size(f) for f in (j.kineto, j.host_et) if f is not None) for j in jobs}
    total = sum(job_bytes.values())
    done_bytes = 0
    report(f"{n} ranks", 0, total)
    if workers is None:
        # Worker processes start with "spawn" (forking a process that already runs polars'
        # thread pool can deadlock), which costs about a second each: only worth it for big runs.
        workers = (os.cpu_count() or 1) if total >= PARALLEL_MIN_BYTES else 1
    nw = max(1, min(workers, n))
    results: dict[int, tuple[Trace, dict[str, Any]]] = {}

    def take(rank: int, res: tuple[str, Any, Any]) -> None:
        nonlocal done_bytes
        status, a, b = res
        if status == "error":
            raise InputError(a, b)
        results[rank] = (a, b)
        done_bytes += job_bytes.get(rank, 0)
        report(f"rank {rank}", done_bytes, total)
        if progress is not None:
            progress(len(results), n, rank)

    args = [
        (j.rank, str(j.host_et) if j.host_et else None, str(j.kineto) if j.kineto else None) for j in jobs
    ]
    if nw == 1:
        for a in args:
            take(a[0], _convert_rank_job(*a))
    else:
        _in_processes(args, nw, take)
    return results


def _in_processes(args: list[tuple[int, str | None, str | None]], nw: int, take: Callable[..., None]) -> None:
    """The ranks' conversions on ``nw`` worker processes (multiprocessing is imported here: a
    one-file run never starts one: ~4 ms less at every start)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=nw, mp_context=multiprocessing.get_context("spawn")) as ex:
        futs = {ex.submit(_convert_rank_job, *a): a[0] for a in args}
        try:
            for f in as_completed(futs):
                take(futs[f], f.result())
        except BaseException:
            for f in futs:
                f.cancel()
            raise


def _traces_by_rank(d: Path, results: dict[int, tuple[Trace, dict[str, Any]]]) -> dict[int, Trace]:
    """The converted traces keyed by the rank their files say (two sets of one rank refused)."""
    traces: dict[int, Trace] = {}
    for rank, (trace, _report) in results.items():
        if trace.meta.rank is not None and trace.meta.rank != rank and rank in traces:
            raise InputError(d, f"rank {rank}'s files say rank {trace.meta.rank}")
        if trace.meta.rank in traces:
            raise InputError(d, f"two sets of files are rank {trace.meta.rank}")
        traces[trace.meta.rank if trace.meta.rank is not None else rank] = trace
    return traces


def read_manifest(d: Path) -> dict[str, Any]:
    from charllm_trace.core.files import read_regular

    mp = d / "manifest.json"
    if not os.path.lexists(mp):
        return {}
    try:
        manifest = json.loads(read_regular(mp, "a JSON manifest"))
    except (RecursionError, ValueError) as exc:
        raise InputError(mp, f"manifest does not parse: {exc}") from None
    if not isinstance(manifest, dict):
        raise InputError(mp, "manifest is not a JSON object")
    return manifest


def convert_path(
    path: str | os.PathLike[str],
    *,
    host_et: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> Run:
    """Convert a run directory, one Kineto profile / host ET, or (with ``host_et``) one pair."""
    from charllm_trace.core.files import path_kind, regular_file

    p = Path(path)
    if host_et is not None:
        regular_file(host_et, "a host execution trace file")
    if path_kind(p) == "dir":
        if host_et is not None:
            raise InputError(p, "--host-et goes with a single Kineto file, not a directory")
        from charllm_trace.collectors.run_checks import label_partial

        run = convert_run(p, workers=workers, progress=progress)
        label_partial(run, p)
        return run
    _refuse_et(p)
    if host_et is None:
        run = convert_file(p)
    else:
        _refuse_et(Path(host_et))
        size = _size(p) + _size(Path(host_et))
        report(p.name, 0, size)
        trace, _ = convert_pair(host_et, p)
        report(p.name, size, size)
        run = Run.single(trace, source=str(p))
    if progress is not None:
        progress(1, 1, run.ranks[0])
    return run


def _refuse_et(p: Path) -> None:
    """A Chakra ET given to convert: one line saying it is already the output (not "not valid JSON")."""
    if p.name.lower().endswith((".et", ".et.gz")):
        raise InputError(p, "is already a Chakra ET (.et): there is nothing to convert; analyse it as it is")


def summary_lines(run: Run) -> list[str]:
    """One line per rank: what was converted and how well it linked (from each trace's report)."""
    out = []
    for rank in run.ranks:
        t = run.traces[rank]
        r = t.meta.extra.get("convert", {})
        parts = [f"rank {rank}: {t.nodes.height} nodes", f"{r.get('comm_nodes', 0)} communication nodes"]
        lm = r.get("link_method")
        if r.get("host_ops") is not None:
            win = (r.get("link") or {}).get("kineto_window")
            within = f" within the profile's {win}" if win else ""
            parts.append(f"host ops linked {r.get('host_ops_linked')}/{r.get('host_ops')} by {lm}{within}")
        else:
            parts.append(f"link: {lm}")
        if r.get("gpu_nodes"):
            linked = r.get("gpu_nodes", 0) - r.get("gpu_unlinked", 0)
            parts.append(f"GPU nodes linked to their launch {linked}/{r.get('gpu_nodes')}")
        if r.get("comm_without_bytes"):
            parts.append(f"{r['comm_without_bytes']} collectives of unknown size")
        out.append(", ".join(parts))
    return out
