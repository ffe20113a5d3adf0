"""``--scheduler`` and ``--keep-going``: the options of the commands that can run on a Dask
cluster (``charllm_trace/engine``, docs/scale.md). The address is a value handed to the command
(an ``engine.Cluster``), never process state: the environment variable ``CHARLLM_TRACE_SCHEDULER``
is only the option's default."""

from __future__ import annotations

import functools
from typing import Any

import click

from charllm_trace.engine import ENV, Cluster

#: why a command reads the whole run in this process even with a scheduler
LOCAL_ONLY = {
    "report": "the report's timelines draw every rank's nodes",
    "diff": "the per-operator comparison needs every rank's nodes",
    "baseline": "the baseline records facts of every rank's nodes",
    "perfetto": "the Chrome trace holds every rank's nodes",
    "astra-sim": "the ASTRA-sim export holds every rank's nodes",
}

SCHEDULER_HELP = (
    "Run on a Dask cluster: a scheduler address (tcp://host:8786) or local:N "
    f"(N worker processes here); env {ENV} (docs/scale.md)."
)
KEEP_GOING_HELP = (
    "With --scheduler: leave out (and note) ranks whose files fail to read, instead of stopping."
)


def cluster_of(address: str | None, keep_going: bool = False) -> Cluster | None:
    """The cluster ``--scheduler``/``--keep-going`` name (None: this process)."""
    return Cluster(address, keep_going) if address else None


def _say_local(command: str) -> Any:
    def note(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value:
            click.echo(
                f"note: --scheduler: {command} runs in this process ({LOCAL_ONLY[command]}; docs/scale.md)",
                err=True,
            )
        return value

    return note


def scheduler_option(command: str) -> Any:
    """``--scheduler ADDRESS`` (default: env ``CHARLLM_TRACE_SCHEDULER``) and ``--keep-going`` for
    ``command``: the command receives ``cluster`` (an ``engine.Cluster``, or None). A command in
    :data:`LOCAL_ONLY` takes the options, says it runs here (and why), and receives nothing."""

    def options(f: Any, expose: bool) -> Any:
        f = click.option("--keep-going", is_flag=True, expose_value=expose, help=KEEP_GOING_HELP)(f)
        return click.option(
            "--scheduler",
            metavar="ADDRESS",
            default=None,
            envvar=ENV,
            show_envvar=False,
            expose_value=expose,
            callback=_say_local(command) if command in LOCAL_ONLY else None,
            help=SCHEDULER_HELP,
        )(f)

    def deco(f: Any) -> Any:
        if command in LOCAL_ONLY:
            return options(f, expose=False)

        @functools.wraps(f)
        def wrapper(*args: Any, scheduler: str | None = None, keep_going: bool = False, **kw: Any) -> Any:
            if scheduler:  # this process drives the workers: polars with one arena (core/alloc.py)
                from charllm_trace.core.alloc import one_arena_for_driver

                one_arena_for_driver()
            return f(*args, cluster=cluster_of(scheduler, keep_going), **kw)

        return options(wrapper, expose=True)

    return deco
