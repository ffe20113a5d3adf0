"""``charllm-trace convert`` (issue 3): the click command (registered in cli/app.py).

What it does is in engine/convert.py (:func:`charllm_trace.engine.convert.convert_lines`), imported when
the command runs: that module loads the converters (and polars), which ``--help`` does not need
(tests/test_alloc.py).
"""

from __future__ import annotations

import click

from charllm_trace.cli.cache import allow_partial_option
from charllm_trace.cli.scale import scheduler_option
from charllm_trace.engine import Cluster


@click.command("convert")
@click.argument("path", type=click.Path())
@click.option("-o", "--output", required=True, help="Output directory for rank-<N>.et files.")
@click.option(
    "--host-et", type=click.Path(), default=None, help="With a single Kineto file: its host execution trace."
)
@click.option(
    "--workers", type=int, default=None, help="Worker processes (default: one per CPU, at most one per rank)."
)
@click.option("--gz", is_flag=True, help="Write gzip-compressed rank-<N>.et.gz files.")
@click.option("--force", is_flag=True, help="Replace existing rank-<N>.et files in the output directory.")
@allow_partial_option
@scheduler_option("convert")
def convert_cmd(
    path: str, output: str, host_et: str | None, workers: int | None, gz: bool, force: bool,
    cluster: Cluster | None,
) -> None:  # fmt: skip
    """Convert a run directory, or one Kineto profile / host ET, to one Chakra ET per rank.

    \b
    charllm-trace convert RUN_DIR -o et/
    charllm-trace convert kineto.json.gz --host-et host_et.json.gz -o et/
    """
    from charllm_trace.cli.progress import input_progress
    from charllm_trace.engine.convert import convert_lines

    lines = convert_lines(path, output, host_et, workers, gz=gz, force=force, cluster=cluster, progress=input_progress)
    for line in lines:
        click.echo(line)
