"""The one road from an input to typed results (docs/architecture.md, "The service").

:func:`analyze` takes any input the tool reads — an ET file, a directory of ETs, a collected run
directory, a Kineto or host JSON, an fsspec URL of any of these, or a results file written by
``--save`` — and returns an :class:`Analysis`. It

1. resolves the input: a results file is read back (no trace, no cache); a URL is copied here
   once (``inputs/localize.py``) and the copy read, its results named by the URL;
2. consults the one cache front end: the results entry (``store/results_cache.py``) keyed by the
   input's content, the options, the ranks chosen and the code, and beside it compare's sweep row
   (``store/sweep_cache.py``, keyed by the results key);
3. runs the analyses here (``loader.load`` then ``analysis.api.analyze_run``) or, given a
   ``scheduler``, on a Dask cluster (``engine/driver.py``): the cluster is an argument, never
   process state;
4. hands back the results (a ``RunAnalysis``), and what was asked beside them: the report's views,
   the loaded ``Run`` (``diff`` and ``baseline`` read its nodes), the sweep row.

Every command that analyses a run (``analyze``, ``report``, ``check``, ``baseline``, ``diff``,
``compare``) and the library's ``charllm_trace.analyze`` call it (tests/test_service.py).

On a cache hit nothing of the analyses, the graph engine, the converters or numpy is imported
(``store/results_cache.py``): those modules are imported inside the functions that run them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from charllm_trace.engine import Cluster
from charllm_trace.et import cache as et_cache
from charllm_trace.inputs.urls import is_url
from charllm_trace.store import results_cache, sweep_cache
from charllm_trace.store.results import is_results_file, read_results

if TYPE_CHECKING:
    from charllm_trace.analysis.results import AnalyzeOptions, RunAnalysis
    from charllm_trace.core.model import Run
    from charllm_trace.render.report_views import ReportViews


@dataclass(frozen=True)
class Request:
    """What to read and what to hand back, beside the analysis options.

    ``ranks`` / ``sample``: only these ranks (``--ranks``), then N of them evenly spaced
    (``--sample``); only their files are read. ``views``: the report's views too. ``run``: the
    loaded ``Run`` too (its nodes; a cache hit still loads the trace, through the input cache).
    ``row``: compare's sweep row (``regress.sweep.run_row``); when its cache entry holds it, the
    results themselves are not read (``Analysis.analysis`` is None). ``cache``: use the caches
    (None: the process's choice, ``et.cache.enabled()``: ``--no-cache``, ``CHARLLM_TRACE_NO_CACHE``).
    ``spill``: with a scheduler, a directory or URL every worker and this process reach, where the
    workers write their ranks' own rows instead of sending them (``engine/spill.py``); the results
    then name those files (``RunAnalysis.spilled``) and the caller removes the location once it has
    written its output.
    """

    ranks: tuple[int, ...] | None = None
    sample: int | None = None
    views: bool = False
    run: bool = False
    row: bool = False
    cache: bool | None = None
    spill: str | None = None

    def use_cache(self) -> bool:
        return et_cache.enabled() if self.cache is None else self.cache

    def rank_list(self) -> list[int] | None:
        return None if self.ranks is None else list(self.ranks)


@dataclass
class Analysis:
    """What :func:`analyze` hands back.

    ``analysis``: the results (None only when ``Request.row`` was met by the row's cache entry);
    ``views`` / ``run`` / ``row``: when asked for; ``hit``: the results came from the cache;
    ``saved``: the input was a results file (``--save``)."""

    source: str
    analysis: RunAnalysis | None
    views: ReportViews | None = None
    run: Run | None = None
    row: dict[str, Any] | None = None
    hit: bool = False
    saved: bool = False

    def results(self) -> RunAnalysis:
        """The results (a row-only hit has none: ask without ``Request.row``)."""
        if self.analysis is None:
            raise ValueError(f"{self.source}: only the sweep row was read (Request.row)")
        return self.analysis

    def loaded(self) -> Run:
        """The loaded run (asked for with ``Request.run``)."""
        if self.run is None:
            raise ValueError(f"{self.source}: the run was not loaded (ask with Request.run)")
        return self.run


def is_saved(source: str | os.PathLike[str]) -> bool:
    """Whether ``source`` is a results file written by ``--save`` (read back, not analysed)."""
    return not is_url(source) and is_results_file(source)


def analyze(
    source: str | os.PathLike[str],
    options: AnalyzeOptions | None = None,
    request: Request | None = None,
    *,
    scheduler: Cluster | str | None = None,
) -> Analysis:
    """The results of ``source`` analysed with ``options`` (see the module's docstring).

    ``scheduler``: a Dask scheduler address (``tcp://host:8786``, ``local:N``) or an
    ``engine.Cluster``; None analyses in this process. A request for the report's views or the
    ``Run`` is met here even with a scheduler (they need every rank's nodes). Raises InputError
    for bad input."""
    if options is None:
        from charllm_trace.analysis.results import AnalyzeOptions

        options = AnalyzeOptions()
    req = request or Request()
    src = os.fspath(source)
    if not req.run and is_saved(src):
        return _saved(src, req)
    cluster = Cluster(scheduler) if isinstance(scheduler, str) and scheduler else scheduler or None
    if cluster is not None and not (req.views or req.run):
        return _on_cluster(src, options, req, cluster)
    return _here(src, options, req)


def _saved(src: str, req: Request) -> Analysis:
    """A results file read back: its analysis (and views, row) as saved."""
    saved = read_results(src)
    got = Analysis(src, saved.analysis, saved=True)
    if req.views:
        got.views = saved.views()  # InputError when it was saved without them
    return _with_row(got, req)


def _with_row(got: Analysis, req: Request) -> Analysis:
    if req.row and got.row is None:
        from charllm_trace.regress.sweep import run_row

        got.row = run_row(got.results())
    return got


def _on_cluster(src: str, options: AnalyzeOptions, req: Request, cluster: Cluster) -> Analysis:
    """On the Dask cluster (docs/scale.md): the workers read the input (URLs too); no results entry."""
    from charllm_trace.engine.driver import analyze_distributed

    res = analyze_distributed(
        src,
        options,
        req.rank_list(),
        cluster=cluster,
        cache=req.use_cache(),
        sample=req.sample,
        spill=req.spill,
    )
    return _with_row(Analysis(src, res), req)


@dataclass
class _Input:
    """The input as given (``source``) and the local path its bytes are read from (a URL's copy)."""

    source: str
    local: str

    @property
    def url(self) -> bool:
        return self.local != self.source


def _resolve(src: str) -> _Input:
    if not is_url(src):
        return _Input(src, src)
    from charllm_trace.inputs.localize import localize_input

    return _Input(src, str(localize_input(src)))


def _here(src: str, options: AnalyzeOptions, req: Request) -> Analysis:
    """In this process, through the cache when it is on."""
    inp = _resolve(src)
    key = _key(inp, options, req) if req.use_cache() else None
    if key is not None:
        got = _cached(inp, key, req)
        if got is not None:
            return got
    run, res = _load_and_analyze(inp, options, req)
    got = Analysis(src, res, run=run if req.run else None)
    if req.views:
        from charllm_trace.render.report_views import drawn_run, report_views

        got.views = report_views(drawn_run(run, res), res.classified)
    if key is not None:
        results_cache.store(key, res, got.views)
    _with_row(got, req)
    if key is not None and got.row is not None:
        sweep_cache.store(sweep_cache.row_key(key), got.row)
    return got


def _key(inp: _Input, options: AnalyzeOptions, req: Request) -> str | None:
    try:
        return results_cache.results_key(inp.local, options, req.rank_list(), req.sample)
    except OSError:
        return None  # unreadable: loading words the error


def _cached(inp: _Input, key: str, req: Request) -> Analysis | None:
    """What the cache holds for ``key``: the sweep row alone when that is all that is asked,
    else the results (and views); None on a miss. A hit that needs the ``Run`` loads it."""
    if req.row and not (req.views or req.run):
        row = sweep_cache.lookup(sweep_cache.row_key(key), inp.source)
        if row is not None:
            _note_hit(inp, req)
            return Analysis(inp.source, None, row=row, hit=True)
    saved = results_cache.lookup(key, inp.source, views=req.views)
    if saved is None:
        return None
    _note_hit(inp, req)
    got = Analysis(inp.source, saved.analysis, views=saved.views() if req.views else None, hit=True)
    if req.run:
        got.run = _load(inp, req)
    _with_row(got, req)
    if got.row is not None:
        sweep_cache.store(sweep_cache.row_key(key), got.row)
    return got


def _note_hit(inp: _Input, req: Request) -> None:
    """A hit skips reading the run: say what its reader would (not when the run is loaded anyway,
    nor for a URL's copy: the engine does not say it for URLs either)."""
    if req.run or inp.url:
        return
    from charllm_trace.collectors.run_checks import note_on_results_hit

    note_on_results_hit(inp.source)


def _load(inp: _Input, req: Request) -> Run:
    from charllm_trace.inputs import loader

    if inp.url:
        return loader.load_copy(inp.source, Path(inp.local), ranks=req.rank_list(), sample=req.sample)
    return loader.load(inp.local, cache=req.use_cache(), ranks=req.rank_list(), sample=req.sample)


def _load_and_analyze(inp: _Input, options: AnalyzeOptions, req: Request) -> tuple[Run, RunAnalysis]:
    from charllm_trace.analysis.api import analyze_run

    # the ranks are chosen before their files are read (loader.load)
    run = _load(inp, req)
    return run, analyze_run(run, options)
