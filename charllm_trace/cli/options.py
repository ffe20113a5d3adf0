"""How the commands that analyse a run call the service (``service.analyze``; imported where it
is called: a repeated ``analyze --format json`` printed from the output cache imports no polars,
issue 26 item 2, and the service imports the stores, which import polars): the analysis
options they share, gathered into one typed value (:class:`AnalysisArgs`) and checked in one
place, and the call itself with its progress line. Used by ``cli/analyze.py``, ``cli.py``
(``check``, ``baseline``, ``diff``) and ``cli/compare.py``."""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from charllm_trace.core.errors import UsageError

if TYPE_CHECKING:
    from charllm_trace import service
    from charllm_trace.analysis.results import AnalyzeOptions
    from charllm_trace.engine import Cluster


@dataclass(frozen=True)
class AnalysisArgs:
    """The analysis options of a command as given on its command line (``analyze`` takes them all;
    ``report`` a few; the others none). :meth:`options` and :meth:`request` check and parse them
    (UsageError: one line, exit 2, before anything is read)."""

    ranks: str | None = None
    sample: int | None = None
    per_step: bool = False
    step_marker: str | None = None
    hta_compat: bool = False
    hta_keep_last_step: bool = False
    peak_gbps: float | None = None
    parallel: str | None = None
    simulate: bool = False
    energy_method: str = "trapezoid"
    what_if: str | None = None
    no_critical_path: bool = False
    breakdown_top: int | None = None

    def options(self, cluster: Cluster | None = None, **fixed: Any) -> AnalyzeOptions:
        """The ``AnalyzeOptions`` these arguments ask for (``fixed``: fields the command sets)."""
        from charllm_trace.analysis.parallel import parse_parallel
        from charllm_trace.analysis.results import AnalyzeOptions

        if self.peak_gbps is not None and not self.peak_gbps > 0:
            raise UsageError("--peak-gbps must be > 0")
        opts = AnalyzeOptions(
            per_step=self.per_step,
            hta_compat=self.hta_compat or self.hta_keep_last_step,
            hta_keep_last_step=self.hta_keep_last_step,
            peak_gbps=self.peak_gbps,
            parallel=parse_parallel(self.parallel) if self.parallel else None,
            simulate=self.simulate,
            energy_method=self.energy_method,
            critical_path=not self.no_critical_path,
            what_if=parse_what_if_option(self.what_if, cluster),
            breakdown_top=self.breakdown_top,
            step_marker=self.step_marker or None,
        )
        return dataclasses.replace(opts, **fixed)

    def request(self, **kw: Any) -> service.Request:
        """The service request: ``--ranks`` and ``--sample`` parsed, ``kw`` its other fields."""
        from charllm_trace import service  # here: see the module docstring (start-up)
        from charllm_trace.core.limits import parse_ranks, parse_sample

        wanted, n_sample = parse_ranks(self.ranks), parse_sample(self.sample)
        return service.Request(ranks=None if wanted is None else tuple(wanted), sample=n_sample, **kw)


_FIELDS = frozenset(f.name for f in dataclasses.fields(AnalysisArgs))


def analysis_args(f: Any) -> Any:
    """Hands the command its analysis options as one ``args: AnalysisArgs`` (the click options
    stay as they are: declared on the command, with their names)."""

    @functools.wraps(f)
    def wrapper(*a: Any, **kw: Any) -> Any:
        given = {k: kw.pop(k) for k in list(kw) if k in _FIELDS}
        return f(*a, args=AnalysisArgs(**given), **kw)

    return wrapper


def parse_what_if_option(text: str | None, cluster: Cluster | None = None) -> dict[str, float] | None:
    """``--what-if`` text -> {key: value}; bad text is a UsageError (one line, exit 2), before
    anything is read (on a cluster, keys that need the whole run are refused too)."""
    if text is None:
        return None
    from charllm_trace.analysis.whatif_keys import parse_what_if, per_edge_keys

    out = parse_what_if(text)
    if cluster is not None and per_edge_keys(out):
        raise UsageError(
            f"--what-if: {per_edge_keys(out)[0]} needs the whole run's collectives and operators: "
            "run it without --scheduler"
        )
    return out


def analysed(
    source: str | os.PathLike[str],
    options: AnalyzeOptions | None = None,
    request: service.Request | None = None,
    cluster: Cluster | None = None,
) -> service.Analysis:
    """``service.analyze`` with the reading progress line on the terminal."""
    from charllm_trace import service
    from charllm_trace.cli.progress import input_progress

    with input_progress("reading"):
        return service.analyze(source, options, request, scheduler=cluster)


def regress_analysed(
    source: str, options: AnalyzeOptions, *, run: bool = False, cluster: Cluster | None = None
) -> service.Analysis:
    """``service.analyze`` with the per-step rows headline figures need (``regress.api.
    regress_options``; ``check``, ``baseline``, ``diff``); ``run``: the loaded run too."""
    from charllm_trace import service
    from charllm_trace.regress.api import regress_options

    return service.analyze(source, regress_options(options), service.Request(run=run), scheduler=cluster)
