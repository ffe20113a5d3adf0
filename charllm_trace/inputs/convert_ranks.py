"""``convert`` of a run directory with worker processes that write their ranks' Chakra ETs
themselves (issue 26 item 4): each worker converts one rank, attaches the run's facts for it
(telemetry, host, device: ``converters.run_dir.attach_run_facts``) and writes its ET under a
temporary name in the output directory; only a small record comes back (the rank's metadata,
its traced span and its summary line). Without this, the workers sent every rank's node
tables back and this process encoded every ET, one after the other.

The ETs carry the run's manifest, which the whole run decides (``collectors.run_checks``
``label_partial``: a finished run missing ranks is labelled). The workers write the manifest of
a complete run; if the ranks' records then say otherwise (a partial run, ranks whose files name
other ranks), the temporary files are removed and the run is converted again in this process
(``convert_run`` + ``write_run``): the files are those ``convert_path`` + ``write_run`` write.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charllm_trace.collectors.outcome import check_one_run, reader_note
from charllm_trace.collectors.run_checks import check_spans, label_partial, trace_span
from charllm_trace.converters.run_dir import (
    PARALLEL_MIN_BYTES,
    attach_run_facts,
    convert_pair,
    convert_run,
    pair_files,
    read_manifest,
    summary_lines,
)
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import NODE_SCHEMA, Run, Trace, TraceMeta, empty_frame
from charllm_trace.et.writer import finish_output, prepare_output, rank_file_name, write_et, write_run


@dataclass
class Written:
    """What a worker sends back for one rank: never its node tables."""

    rank: int  # the rank its files are paired under
    meta: TraceMeta
    span: tuple[int, int] | None
    tmp: str  # its ET's temporary name in the output directory
    line: str  # ``summary_lines``' line


def partial_name(rank: int, gz: bool, token: str) -> str:
    return f".partial-{token}-{rank_file_name(rank, gz=gz)}"


def write_rank_job(
    rank: int, files: tuple[str | None, str | None], run_dir: str, out: str, gz: bool,
    facts: dict[str, Any], manifest: dict[str, Any], token: str,
) -> tuple[str, Any, Any]:  # fmt: skip
    """Worker entry point: ("ok", Written, None) or ("error", path, problem)."""
    try:
        trace, _ = convert_pair(*files)
    except InputError as exc:
        return "error", exc.path, exc.problem
    if trace.meta.rank is None:
        trace.meta.rank = rank
    attach_run_facts(Path(run_dir), {trace.meta.rank: trace}, facts)
    tmp = partial_name(trace.meta.rank, gz, token)
    write_et(trace, Path(out) / tmp, overwrite=True, manifest=manifest)
    line = summary_lines(Run.single(trace))[0]
    return "ok", Written(rank, trace.meta, trace_span(trace), tmp, line), None


def convert_write_run(
    run_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    workers: int | None,
    force: bool,
    gz: bool,
) -> tuple[list[str], list[Path]] | None:
    """Convert the run directory ``run_dir`` into ``out_dir`` with worker processes writing the
    ETs (``workers``: default as ``convert_run`` chooses); (summary lines, files written), as
    ``convert_path`` then ``write_run``. None, having done nothing, when one process would do."""
    d, out = Path(run_dir), Path(out_dir)
    facts = read_manifest(d)
    check_one_run(d, facts)
    jobs = pair_files(d)
    nw = _workers(jobs, workers)
    if nw <= 1:
        return None
    partial = [j.rank for j in jobs if j.kineto is None or j.host_et is None]
    ranks = sorted(j.rank for j in jobs)
    note = reader_note(d, facts, ranks, partial)
    manifest = {**facts, "reader_note": note} if note else facts
    _, present = prepare_output(out, ranks, overwrite=force, gz=gz)
    token = uuid.uuid4().hex[:12]
    args = [
        (j.rank, (_s(j.host_et), _s(j.kineto)), str(d), str(out), gz, facts, manifest, token) for j in jobs
    ]
    try:
        done = _pool(args, nw)
        run = _checked(d, done, manifest, ranks)
    except BaseException:
        _remove(out, token)
        raise
    if run is None or run.manifest != manifest:
        _remove(out, token)  # the run decides another manifest: convert it here, as without workers
        return _serial(d, out, nw, gz, run)
    paths = _place(out, done, gz)
    finish_output(out, paths, present)
    return [w.line for w in sorted(done, key=lambda w: w.meta.rank)], paths


def _workers(jobs: list[Any], workers: int | None) -> int:
    if workers is None:
        total = sum(os.path.getsize(f) for j in jobs for f in (j.kineto, j.host_et) if f is not None)
        workers = (os.cpu_count() or 1) if total >= PARALLEL_MIN_BYTES else 1
    return max(1, min(workers, len(jobs)))


def _serial(d: Path, out: Path, workers: int, gz: bool, run: Run | None) -> tuple[list[str], list[Path]]:
    whole = convert_run(d, workers=workers)
    if run is None:
        label_partial(whole, d)
    else:  # its notes are printed: the same ranks, the same manifest
        whole.manifest = run.manifest
    return summary_lines(whole), write_run(whole, out, overwrite=True, gz=gz)


def _s(p: Path | None) -> str | None:
    return str(p) if p is not None else None


def _pool(args: list[tuple], workers: int) -> list[Written]:
    """Run ``write_rank_job`` over ``args`` in ``workers`` spawned processes (``convert_run``'s
    start method); the first rank that fails to convert raises its InputError."""
    out: list[Written] = []
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(args))), mp_context=ctx) as ex:
        futs = [ex.submit(write_rank_job, *a) for a in args]
        try:
            for f in as_completed(futs):
                status, a, b = f.result()
                if status == "error":
                    raise InputError(a, b)
                out.append(a)
        except BaseException:
            for f in futs:
                f.cancel()
            raise
    return out


def _checked(d: Path, done: list[Written], manifest: dict[str, Any], ranks: list[int]) -> Run | None:
    """The checks ``convert_run`` and ``label_partial`` make, on the ranks' records: a Run of
    node-less traces with the manifest the run decides (its notes printed); None, printing
    nothing, when the ranks the files say are not the ranks they are paired under."""
    traces = {w.meta.rank: Trace(nodes=empty_frame(NODE_SCHEMA), meta=w.meta) for w in done}
    if sorted(traces) != ranks or len(done) != len(ranks):
        return None
    check_spans(d, [(*w.span, w.meta.rank) for w in sorted(done, key=lambda w: w.meta.rank) if w.span])
    sizes = {t.meta.world_size for t in traces.values() if t.meta.world_size is not None}
    if len(sizes) > 1:
        raise InputError(d, f"ranks disagree on the world size ({sorted(sizes)}): files from different runs?")
    run = Run(traces=traces, manifest=dict(manifest), source=str(d))
    label_partial(run, d)
    return run


def _place(out: Path, done: list[Written], gz: bool) -> list[Path]:
    paths = []
    for w in sorted(done, key=lambda w: w.meta.rank):
        p = out / rank_file_name(w.meta.rank, gz=gz)
        os.replace(out / w.tmp, p)
        paths.append(p)
    return paths


def _remove(out: Path, token: str) -> None:
    if out.is_dir():
        for p in out.glob(f".partial-{token}-*"):
            p.unlink(missing_ok=True)
