"""What a worker runs for one rank: read it (``load_rank``), then describe, analyse or convert
it. Each returns a small result; bad input comes back as a :class:`Failure` (path and one-line
reason) rather than an exception, so that Dask retries only what failed for other reasons (a
worker that died)."""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charllm_trace.core.errors import InputError
from charllm_trace.core.model import ProcessGroup, Trace
from charllm_trace.engine.graph_step import build_task, graph_file, store_graph
from charllm_trace.engine.plan import RankSpec
from charllm_trace.inputs.urls import is_url


@dataclass
class Failure:
    path: str
    problem: str


@dataclass
class Loaded:
    """One rank, read: stays on its worker (only :class:`RankMeta` and results travel)."""

    rank: int
    trace: Trace
    path: str
    manifest: dict[str, Any] | None  # an ET's header manifest


@dataclass
class RankMeta:
    rank: int
    path: str
    groups: list[ProcessGroup]
    hostname: str | None
    world_size: int | None
    manifest: dict[str, Any] | None


def _localize(spec: RankSpec, tmp: Path) -> tuple[dict[str, str], str | None, dict[str, str]]:
    """Local copies of a URL spec's files (and its run's other files); (files, root, local name -> URL)."""
    from charllm_trace.inputs import urls

    back: dict[str, str] = {}
    files = {}
    for role, u in spec.files.items():
        name = u.rstrip("/").rsplit("/", 1)[-1]
        files[role] = str(urls.fetch(u, tmp / name))
        back[str(tmp / name)] = u
    for name, u in spec.side:
        urls.fetch(u, tmp / name)
        back[str(tmp / name)] = u
    return files, (str(tmp) if spec.root is not None else None), back


def load_rank(spec: RankSpec, cache: bool = False) -> Loaded | Failure:
    """Read one rank of a plan (``engine/plan.py``) on this worker."""
    tmp: Path | None = None
    back: dict[str, str] = {}
    try:
        files, root = spec.files, spec.root
        if any(is_url(u) for u in spec.files.values()):
            tmp = Path(tempfile.mkdtemp(prefix="charllm-rank-"))
            files, root, back = _localize(spec, tmp)
            cache = False  # the copy is temporary
        return _load(spec, files, root, cache)
    except InputError as exc:
        path = exc.path or spec.path
        if tmp is not None:
            path = back.get(path, spec.root or spec.path if path.startswith(str(tmp)) else path)
        return Failure(path, exc.problem)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _load(spec: RankSpec, files: dict[str, str], root: str | None, cache: bool) -> Loaded:
    if spec.kind in ("et", "et1"):
        from charllm_trace.et.reader import rank_from_name, read_et_with_manifest

        trace, man = read_et_with_manifest(files["et"], cache=cache)
        if trace.meta.rank is None and spec.kind == "et1":
            return Loaded(0, trace, spec.path, man)  # as Run.single
        if trace.meta.rank is None:
            rank = rank_from_name(spec.path.rstrip("/").rsplit("/", 1)[-1])
            if rank is None:
                raise InputError(
                    spec.path,
                    "cannot tell its rank: no charllm.rank in the header and no number in the file name (name it rank-<N>.et)",
                )
            trace.meta.rank = rank
            trace.meta.extra["rank_from"] = "file name"
        return Loaded(trace.meta.rank, trace, spec.path, man)
    if spec.kind == "json":
        from charllm_trace.converters.run_dir import convert_file

        run = convert_file(files["json"])
        r = run.ranks[0]
        return Loaded(r, run.traces[r], spec.path, None)
    from charllm_trace.converters.run_dir import attach_run_facts, convert_pair

    trace, _report = convert_pair(files.get("host_et"), files.get("kineto"))
    rank = spec.rank if spec.rank is not None else 0
    if trace.meta.rank is None:
        trace.meta.rank = rank
    if root is not None:
        attach_run_facts(Path(root), {trace.meta.rank: trace}, spec.manifest)
    return Loaded(trace.meta.rank, trace, spec.path, None)


def rank_meta(loaded: Loaded | Failure) -> RankMeta | Failure:
    """What the driver needs of every rank before analysing any: its groups, host and world."""
    if isinstance(loaded, Failure):
        return loaded
    m = loaded.trace.meta
    return RankMeta(
        loaded.rank, loaded.path, list(m.process_groups), m.hostname, m.world_size, loaded.manifest
    )


def analyze_task(
    loaded: Loaded,
    options: Any,
    dims: Mapping[str, str | None],
    hosts: Mapping[int, str | None],
    node_gpus: int | None = None,
) -> Any:
    """One rank's part of the analysis (``analysis/rank_parts.py``), without node tables."""
    from charllm_trace.analysis.rank_parts import analyze_rank

    return analyze_rank(loaded.rank, loaded.trace, options, dims, hosts, node_gpus=node_gpus)


def meta_task(spec: RankSpec, cache: bool = False) -> RankMeta | Failure:
    """:func:`rank_meta` of the rank read from ``spec``, its trace dropped here: what the
    driver needs before analysing, without the worker holding every rank's trace until then."""
    return rank_meta(load_rank(spec, cache))


def analyze_spec_task(spec: RankSpec, cache: bool, where: str | None, graph: bool = False, **kw: Any) -> Any:
    """The rank read again from ``spec`` and analysed (:func:`analyze_task`, or
    :func:`analyze_rows_task` with a spill location ``where``); its trace freed once analysed.
    ``graph`` (with ``where``): its share of the execution graph is built too and stored under
    ``where`` (``engine/graph_step.py`` ``store_graph``) for the graph rounds, which read it from
    there instead of the worker keeping the rank's trace."""
    loaded = load_rank(spec, cache)
    if isinstance(loaded, Failure):  # it was read once already: the file changed since
        raise InputError(loaded.path, loaded.problem)
    if where is None:
        return analyze_task(loaded, **kw)
    out = analyze_rows_task(loaded, where=where, **kw)
    if graph:  # after the analysis, on the same trace, as when the worker kept it (build_task)
        store_graph(build_task(loaded), graph_file(where, loaded.rank))
    return out


def analyze_rows_task(
    loaded: Loaded,
    options: Any,
    dims: Mapping[str, str | None],
    hosts: Mapping[int, str | None],
    node_gpus: int | None,
    where: str,
) -> tuple[Any, dict[str, str]]:
    """:func:`analyze_task`, its rank rows written under ``where`` instead of sent
    (``engine/spill.py``): (the part, frame name -> file)."""
    from charllm_trace.engine.spill import write_rows

    part = analyze_task(loaded, options, dims, hosts, node_gpus)
    return part, write_rows(part, where, options.breakdown_top)


def info_task(loaded: Loaded) -> dict[str, Any]:
    """One rank's part of ``info`` (``et/summary.py``)."""
    from charllm_trace.et.summary import rank_info

    return rank_info(loaded.rank, loaded.trace)


def convert_task(
    loaded: Loaded, out: str, gz: bool, manifest: Mapping[str, Any], token: str
) -> tuple[int, str, str]:
    """Write one rank's Chakra ET under a temporary name in ``out`` (the driver renames it into
    place once every rank is written). Returns (rank, temporary name, summary line)."""
    from charllm_trace.converters.run_dir import summary_lines
    from charllm_trace.core.model import Run
    from charllm_trace.et.writer import encode_et, rank_file_name

    data = encode_et(loaded.trace, manifest)
    if gz:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    tmp_name = f".{rank_file_name(loaded.rank, gz=gz)}.partial-{token}"
    if is_url(out):
        from charllm_trace.inputs import urls

        fs, p = urls.fs_of(out)
        with fs.open(p.rstrip("/") + "/" + tmp_name, "wb") as f:
            f.write(data)
    else:
        target = Path(out) / tmp_name
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    line = summary_lines(Run.single(loaded.trace))[0]
    return loaded.rank, tmp_name, line
