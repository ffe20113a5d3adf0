"""``charllm-trace info`` (issue 2): the click command (registered in cli/app.py).

The summary is :func:`charllm_trace.et.summary.run_summary` (or, with ``--scheduler``, one rank per
worker); the table and the JSON are drawn by render/info.py.
"""

from __future__ import annotations

import click

from charllm_trace.cli.cache import allow_partial_option, wide_option
from charllm_trace.cli.scale import scheduler_option
from charllm_trace.engine import Cluster


@click.command("info")
@click.argument("path", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times in ns, bytes in bytes).")
@click.option("--no-cache", is_flag=True, help="Decode the files again instead of using the cache.")
@allow_partial_option
@wide_option
@scheduler_option("info")
def info_cmd(path: str, as_json: bool, no_cache: bool, wide: bool, cluster: Cluster | None) -> None:
    """Summarise an ET file or a directory of per-rank ETs (or any run charllm-trace reads):
    ranks, node counts by type, time span, collectives and bytes, process groups, devices, telemetry."""
    # The library is imported here, not at the top: `charllm-trace --help` and a cached analysis
    # load no polars (tests/test_alloc.py).
    if cluster is not None:  # each rank summarised on a worker (docs/scale.md)
        from charllm_trace.engine.driver import info_distributed

        summary = info_distributed(path, cluster=cluster, cache=not no_cache)
    else:
        from charllm_trace.et.summary import run_summary
        from charllm_trace.inputs.loader import load

        summary = run_summary(load(path, cache=not no_cache))
    if as_json:
        from charllm_trace.render.info import info_json

        click.echo(info_json(summary))
    else:
        from charllm_trace.render.fit import table_console
        from charllm_trace.render.info import render_info

        render_info(summary, table_console(wide))
