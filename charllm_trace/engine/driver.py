"""The driver's side of ``--scheduler``: plan the ranks, have workers read and analyse them, and
merge what comes back (``analysis/rank_parts.py``, ``et/summary.py``). Only per-rank summaries
travel: never a node table (docs/scale.md lists them). With a spill location, all of that runs
as one task on a worker (:func:`reduce_task`) and the driver receives a result without rows."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from charllm_trace.core.errors import InputError
from charllm_trace.core.model import ProcessGroup
from charllm_trace.engine import Cluster
from charllm_trace.engine.compact import HeldParts
from charllm_trace.engine.graph_step import graph_file
from charllm_trace.engine.plan import Plan, plan
from charllm_trace.engine.spill import Written, remove
from charllm_trace.engine.tasks import (
    Failure,
    RankMeta,
    analyze_rows_task,
    analyze_spec_task,
    analyze_task,
    convert_task,
    info_task,
    load_rank,
    meta_task,
    rank_meta,
)
from charllm_trace.inputs.urls import is_url


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr, flush=True)


@dataclass
class Gathered:
    """The ranks read on workers: their handles (results on the workers; or, read without
    keeping them, their specs, to be read again) and metadata."""

    plan: Plan
    handles: list[Any]
    metas: list[RankMeta]
    failed: list[Failure]
    manifest: dict[str, Any]


def _read(
    eng: Any,
    path: str,
    ranks: list[int] | None,
    cache: bool,
    sample: int | None = None,
    *,
    keep_going: bool,
    keep: bool = True,
    say: Callable[[str], None] | None = None,
) -> Gathered:
    """Read the ranks on the workers and gather their metadata. ``keep``: the workers keep the
    ranks read (the handles are futures); else each worker drops a rank's trace once its metadata
    is taken and the handles are the ranks' specs, read again by the task that uses them.
    ``say``: how the notes on the input are told (default: printed)."""
    pl_ = plan(path)
    specs = pl_.specs
    late = sample is not None and any(s.rank is None for s in specs)  # ranks told once read
    if sample is not None and not late:  # --sample: chosen before reading, as loader.load does
        ranks = _choose(path, sorted({s.rank for s in specs if s.rank is not None}), ranks, sample)
    if ranks is not None:  # a run directory's ranks are known before reading
        specs = [s for s in specs if s.rank is None or s.rank in ranks]
    shared: dict[ProcessGroup, ProcessGroup] = {}
    each = partial(_share_groups, shared=shared)
    if keep:
        handles = eng.map(load_rank, specs, cache=cache)
        metas = eng.gather_batches(eng.map(rank_meta, handles), each=each)
    else:
        handles, metas = list(specs), eng.map_gather(meta_task, specs, cache=cache, each=each)
    failed = [m for m in metas if isinstance(m, Failure)]
    if failed and not keep_going:
        f = failed[0]
        more = f" (and {len(failed) - 1} other rank file(s) failed; --keep-going analyses the rest)"
        raise InputError(
            f.path, f.problem + (more if len(failed) > 1 else " (--keep-going analyses the other ranks)")
        )
    ok = [(m, h) for m, h in zip(metas, handles, strict=True) if isinstance(m, RankMeta)]
    eng.release([h for m, h in zip(metas, handles, strict=True) if isinstance(m, Failure)])
    seen: dict[int, str] = {}
    for m, _ in ok:
        if m.rank in seen:
            raise InputError(
                m.path, f"mixes two runs: rank {m.rank} again (also in {Path(seen[m.rank]).name})"
            )
        seen[m.rank] = m.path
    worlds = {m.world_size for m, _ in ok if m.world_size is not None}
    if len(worlds) > 1:
        raise InputError(
            pl_.source, f"ranks disagree on the world size ({sorted(worlds)}): files from different runs?"
        )
    ok.sort(key=lambda mh: mh[0].rank)
    if late:
        ranks = _choose(path, sorted(seen), ranks, sample)
    if ranks is not None:
        missing = [r for r in ranks if r not in seen]
        if missing:
            known = sorted(set(seen) | {s.rank for s in pl_.specs if s.rank is not None})
            raise InputError(path, f"no rank {missing} here (ranks present: {known})")
        eng.release([h for m, h in ok if m.rank not in ranks])
        ok = [(m, h) for m, h in ok if m.rank in ranks]
    manifest = dict(pl_.manifest)
    if not manifest:
        manifest = next((dict(m.manifest) for m, _ in ok if m.manifest), {})
    g = Gathered(pl_, [h for _, h in ok], [m for m, _ in ok], failed, manifest)
    _label(g, worlds, say or _note)
    return g


def _share_groups(
    metas: list[RankMeta | Failure], shared: dict[ProcessGroup, ProcessGroup]
) -> list[RankMeta | Failure]:
    """A gathered batch of metadata, each process group held once for all ranks (``shared``,
    from batch to batch): every rank names the groups it is in, and a group of all N ranks
    arrives N times, N integers each: unshared, 32 MiB at 1,024 ranks and 590 MiB at 4,096
    (measured: docs/scale.md)."""
    for m in metas:
        if isinstance(m, RankMeta):
            m.groups = [shared.setdefault(pg, pg) for pg in m.groups]
    return metas


def _choose(path: str, present: list[int], ranks: list[int] | None, sample: int | None) -> list[int] | None:
    """``limits.choose_ranks`` (``--ranks``, then ``--sample``), its error naming ``path``."""
    from charllm_trace.core.limits import choose_ranks

    try:
        return choose_ranks(present, ranks, sample)
    except InputError as exc:
        raise InputError(path, exc.problem) from None


def _label(g: Gathered, worlds: set[int], say: Callable[[str], None]) -> None:
    """What the local reader says of a directory's run (``run_checks.label_partial``), and the
    ranks left out by --keep-going: printed, and kept as the run's ``partial`` note."""
    notes = []
    if g.plan.kind in ("run_dir", "et_dir"):
        from charllm_trace.collectors.run_checks import check_complete

        if g.plan.kind == "run_dir" and not is_url(g.plan.source):
            from charllm_trace.collectors.outcome import reader_note

            partial = [s.rank for s in g.plan.specs if s.rank is not None and len(s.files) < 2]
            said = reader_note(Path(g.plan.source), g.manifest, [m.rank for m in g.metas], partial)
            if said:
                say(f"{g.plan.source}: {said}")
        # every rank the input holds (before --ranks chose some), failed ones included (noted below)
        present = {m.rank for m in g.metas} | {s.rank for s in g.plan.specs if s.rank is not None}
        note = check_complete(g.plan.source, g.manifest, sorted(present), worlds)
        if note:
            notes.append(note)
    if g.failed:
        left = "; ".join(f"{f.path}: {f.problem}" for f in g.failed)
        notes.append(
            f"--keep-going: {len(g.failed)} rank file(s) could not be read and are left out ({left})"
        )
    for n in notes:
        say(f"{g.plan.source}: {n}")
    if notes:
        prev = g.manifest.get("partial")
        g.manifest["partial"] = "; ".join(([prev] if isinstance(prev, str) else []) + notes)


@dataclass
class Job:
    """What ``analyze`` asks of the cluster (:func:`analyze_distributed`'s arguments)."""

    path: str
    options: Any
    ranks: list[int] | None
    keep_going: bool
    cache: bool
    sample: int | None
    spill: str | None


@dataclass
class Analysed:
    """The ranks analysed on the workers, before their parts are merged: the ranks read, each
    rank's part (``parts``), the breakdown's fold and the files written with a spill location,
    and the graph rounds' critical path and what-if with what they skipped."""

    gathered: Gathered
    parts: HeldParts
    fold: Any
    written: Written | None
    cp_wi: Any
    graph_skipped: dict[str, str]


def analyze_distributed(
    path: str,
    options: Any,
    ranks: list[int] | None = None,
    *,
    cluster: Cluster,
    cache: bool = True,
    sample: int | None = None,
    spill: str | None = None,
) -> Any:
    """``analyze_run`` of the input at ``path`` on the scheduler's workers (see the module's docstring).
    ``spill``: a directory or URL every worker and this process reach, where the workers write
    their ranks' own rows (``engine/spill.py``); the result then names those files in
    ``RunAnalysis.spilled`` (the caller writes the output, then removes ``spill``). With it, the
    whole reduction (reading the ranks' metadata, gathering their parts, the graph rounds, the
    merge) runs as one task on a worker (:func:`reduce_task`), which writes the merged frames'
    rows there too: this process holds none of the ranks' rows and no merge's memory, whatever
    the number of ranks (issue 26; docs/scale.md)."""
    from charllm_trace.engine.cluster import open_engine

    job = Job(path, options, ranks, cluster.keep_going, cache, sample, spill)
    with open_engine(cluster.address) as eng:
        if spill is not None:
            return _reduced(eng.run(reduce_task, job))
        done = _analyze_ranks(eng, job, _note)
    return _merge(done, job)


@dataclass
class Reduced:
    """What :func:`reduce_task` sends back: the result (its frames' rows in files), the notes
    it would have printed, and the input refused (path, problem) instead of a result."""

    result: Any
    said: list[str]
    refused: tuple[str | None, str] | None = None


def reduce_task(job: Job) -> Reduced:
    """:func:`analyze_distributed` with a spill location, on a worker: it maps the ranks' tasks
    on the cluster from there (``engine.cluster.worker_engine``), merges their parts and writes
    every merged frame's rows under ``job.spill`` (``engine/spill.move_held_rows``). Bad input
    comes back as a value (an ``InputError`` is not rebuilt from its pickle, and a task that
    raises is run again)."""
    from charllm_trace.engine.cluster import worker_engine
    from charllm_trace.engine.spill import move_held_rows

    if job.spill is None:
        raise ValueError("reduce_task needs a spill location (job.spill)")
    said: list[str] = []
    try:
        with worker_engine() as eng:
            done = _analyze_ranks(eng, job, said.append)
        res = _merge(done, job)
    except InputError as exc:
        return Reduced(None, said, (exc.path, exc.problem))
    move_held_rows(res, job.spill)
    return Reduced(res, said)


def _reduced(got: Reduced) -> Any:
    """:func:`reduce_task`'s answer here: its notes printed, bad input raised, else the result."""
    for text in got.said:
        _note(text)
    if got.refused is not None:
        raise InputError(*got.refused)
    return got.result


def _analyze_ranks(eng: Any, job: Job, say: Callable[[str], None]) -> Analysed:
    """The ranks read and analysed on the workers through ``eng``, and the graph rounds run
    (``say``: how the notes on the input are told)."""
    from charllm_trace.analysis.api import dims_of
    from charllm_trace.analysis.bandwidth import hosts_of
    from charllm_trace.analysis.group_size import ranks_per_node
    from charllm_trace.analysis.rank_rows import RowsFold

    options, spill, cache = job.options, job.spill, job.cache
    graph = bool(options.critical_path or options.what_if)  # the graph rounds read the traces again
    # with a spill location, the analysis task stores each rank's graph there: no trace is kept
    stored = graph and spill is not None
    g = _read(
        eng, job.path, job.ranks, cache, job.sample, keep_going=job.keep_going, keep=graph and not stored, say=say
    )
    dims = dims_of([m.groups for m in g.metas], g.manifest, options)
    hosts = hosts_of(g.manifest, {m.rank: m.hostname for m in g.metas})
    node_gpus = ranks_per_node(g.manifest)
    kw = {"options": options, "dims": dims, "hosts": hosts, "node_gpus": node_gpus}
    fold = RowsFold(options.breakdown_top)  # with spill: the breakdown's parts summed batch by batch
    parts = HeldParts()  # one concatenated frame per batch, place and schema (engine/compact.py)
    written = Written(spill) if spill is not None else None
    each = partial(_hold, parts=parts, fold=fold if spill is not None else None, written=written)
    try:
        if not graph or stored:  # read again, freed once analysed: a worker holds the ranks in flight
            eng.map_gather(
                analyze_spec_task, g.handles, cache=cache, where=spill, graph=stored, each=each, **kw
            )
        else:  # the ranks kept on the workers (read by _read) for the graph rounds
            task, where = (analyze_task, {}) if spill is None else (analyze_rows_task, {"where": spill})
            eng.gather_batches(eng.map(task, g.handles, **where, **kw), each=each)
        graph_skipped: dict[str, str] = {}
        cp_wi = _graph_rounds(eng, g, parts, options, graph_skipped, spill if stored else None)
        eng.release(g.handles)
    except BaseException:
        parts.close()
        raise
    return Analysed(g, parts, fold, written, cp_wi, graph_skipped)


def _graph_rounds(
    eng: Any, g: Gathered, parts: HeldParts, options: Any, skipped: dict[str, str], stored: str | None
) -> Any:
    """The critical path and what-if: each rank's share of the graph on its worker
    (``engine/graph_step.py``); ``stored``: the spill location where each rank's graph was
    stored by its analysis task (removed once the rounds end), else the ranks are kept."""
    from charllm_trace.engine.graph_step import graph_step

    ranks_read = [m.rank for m in g.metas]
    try:
        return graph_step(
            eng,
            g.handles,
            ranks_read,
            options,
            skipped,
            [p.rank for p in parts if p.no_ts],
            stored=[graph_file(stored, r) for r in ranks_read] if stored is not None else None,
        )
    finally:
        if stored is not None:
            remove(graph_file(stored, 0).rsplit("/", 1)[0])


def _merge(done: Analysed, job: Job) -> Any:
    """The ranks' parts merged into one ``RunAnalysis`` (``analysis/rank_parts.merge_parts``)."""
    from charllm_trace.analysis.rank_parts import merge_parts

    def graph_step(skipped: dict[str, str], no_ts: list[int], simulated: bool) -> Any:
        skipped.update(done.graph_skipped)
        return done.cp_wi

    g, parts = done.gathered, done.parts
    try:
        res = merge_parts(parts, job.options, manifest=g.manifest, source=g.plan.source, graph_step=graph_step)
    finally:
        parts.close()
    res.classified = {}
    if done.written is not None:
        done.fold.apply(res, done.written.drop)
        res.spilled = dict(done.written.files())
    return res


def _hold(got: list[Any], parts: HeldParts, fold: Any, written: Written | None) -> list[Any]:
    """A gathered batch held in ``parts``; with ``fold`` and ``written`` (a spill location), the
    batch is of (part, files written), the time breakdown's parts folded into ``fold``
    (``analysis/rank_rows.py``) first and the files noted in ``written``. Returns nothing to
    keep: what the batch brought is held by those."""
    if fold is None or written is None:
        parts.add(got)
        return []
    batch = [p for p, _ in got]
    fold.add(batch)
    parts.add(batch)
    for p, w in got:
        written.add(p.rank, w)
    return []


def info_distributed(path: str, *, cluster: Cluster, cache: bool = True) -> dict[str, Any]:
    """``info``'s summary of the input at ``path``, each rank summarised on a worker."""
    from charllm_trace.engine.cluster import open_engine
    from charllm_trace.et.summary import merge_rank_infos

    with open_engine(cluster.address) as eng:
        g = _read(eng, path, None, cache, keep_going=cluster.keep_going)
        parts = eng.gather(eng.map(info_task, g.handles))
        eng.release(g.handles)
    return merge_rank_infos(g.plan.source, parts)


def convert_distributed(
    path: str, output: str, *, cluster: Cluster, gz: bool = False, force: bool = False
) -> tuple[list[str], list[str]]:
    """``convert`` on workers: each writes its rank's ET under a temporary name in ``output``
    (a directory or URL every worker reaches); once all are written, the driver renames them
    into place (nothing is left half written). Returns (summary lines, files written)."""
    from charllm_trace.engine.cluster import open_engine
    from charllm_trace.et.writer import RUN_MARKER, rank_file_name
    from charllm_trace.inputs import urls

    existing = existing_rank_files(output)
    if existing and not force:
        raise InputError(
            f"{output.rstrip('/')}/{existing[0]}", "already exists; refusing to overwrite it (use --force)"
        )
    urls.makedirs(output) if is_url(output) else Path(output).mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    written: list[tuple[int, str, str]] = []
    with open_engine(cluster.address) as eng:
        g = _read(eng, path, None, cache=True, keep_going=cluster.keep_going)
        futs = eng.map(convert_task, g.handles, out=output, gz=gz, manifest=g.manifest, token=token)
        try:
            written = eng.gather(futs)
        except BaseException:
            _remove_partials(output, token)
            raise
        eng.release(g.handles)
    base = output.rstrip("/")
    final = []
    for rank, tmp, _line in written:
        dst = f"{base}/{rank_file_name(rank, gz=gz)}"
        urls.rename(f"{base}/{tmp}", dst) if is_url(output) else Path(f"{base}/{tmp}").replace(dst)
        final.append(dst)
    keep = {Path(p).name for p in final}
    for name in existing:  # an earlier conversion's rank files this one does not have
        if name not in keep:
            urls.remove(f"{base}/{name}") if is_url(output) else Path(base, name).unlink(missing_ok=True)
    import orjson

    marker = orjson.dumps({"written_by": "charllm-trace convert", "files": sorted(keep)})
    if is_url(output):
        urls.write_bytes(f"{base}/{RUN_MARKER}", marker)
    else:
        tmpm = Path(base) / f"{RUN_MARKER}.tmp"
        tmpm.write_bytes(marker)
        tmpm.replace(Path(base) / RUN_MARKER)
    return [line for _, _, line in written], final


def existing_rank_files(output: str) -> list[str]:
    """The ``rank-N.et(.gz)`` names in the output directory (local or URL)."""
    import re

    pat = re.compile(r"^rank-\d+\.et(\.gz)?$")
    if is_url(output):
        from charllm_trace.inputs import urls

        try:
            return [n for n, _, _ in urls.list_dir(output) if pat.match(n)]
        except InputError:
            return []
    p = Path(output)
    if p.exists() and not p.is_dir():
        raise InputError(p, "is not a directory")
    return sorted(e.name for e in p.iterdir() if pat.match(e.name)) if p.is_dir() else []


def _remove_partials(output: str, token: str) -> None:
    if is_url(output):
        from charllm_trace.inputs import urls

        try:
            for n, u, _ in urls.list_dir(output):
                if n.endswith(f".partial-{token}"):
                    urls.remove(u)
        except InputError:
            pass
        return
    for e in Path(output).glob(f".*.partial-{token}"):
        e.unlink(missing_ok=True)
