"""``--scheduler`` and ``--keep-going``: the options of the commands that can run on a Dask
cluster (``charllm_trace/engine``, docs/scale.md)."""

from __future__ import annotations

from typing import Any

import click

#: why a command reads the whole run in this process even with a scheduler
LOCAL_ONLY = {
    "report": "the report's timelines draw every rank's nodes",
    "diff": "the per-operator comparison needs every rank's nodes",
    "baseline": "the baseline records facts of every rank's nodes",
    "perfetto": "the Chrome trace holds every rank's nodes",
    "astra-sim": "the ASTRA-sim export holds every rank's nodes",
}


def scheduler_option(command: str) -> Any:
    """``--scheduler ADDRESS`` (env ``CHARLLM_TRACE_SCHEDULER``) and ``--keep-going`` for
    ``command``; a command in :data:`LOCAL_ONLY` says it runs here (and why)."""

    def set_scheduler(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        from charllm_trace import engine

        if value:
            engine.set_scheduler(value)
            ctx.call_on_close(lambda: engine.set_scheduler(None))
        if command in LOCAL_ONLY and engine.scheduler():
            click.echo(
                f"note: --scheduler: {command} runs in this process ({LOCAL_ONLY[command]}; docs/scale.md)",
                err=True,
            )
            engine.set_scheduler("")
            if not value:  # the environment's: hidden for this command only
                import os

                old = os.environ.pop(engine.ENV, None)
                if old is not None:
                    ctx.call_on_close(lambda: os.environ.__setitem__(engine.ENV, old))
        return value

    def set_keep_going(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        from charllm_trace import engine

        if value:
            engine.set_keep_going(True)
            ctx.call_on_close(lambda: engine.set_keep_going(False))
        return value

    def deco(f: Any) -> Any:
        f = click.option(
            "--keep-going",
            is_flag=True,
            expose_value=False,
            callback=set_keep_going,
            help="With --scheduler: leave out (and note) ranks whose files fail to read, instead of stopping.",
        )(f)
        return click.option(
            "--scheduler",
            metavar="ADDRESS",
            default=None,
            expose_value=False,
            callback=set_scheduler,
            help="Run on a Dask cluster: a scheduler address (tcp://host:8786) or local:N "
            "(N worker processes here); env CHARLLM_TRACE_SCHEDULER (docs/scale.md).",
        )(f)

    return deco
