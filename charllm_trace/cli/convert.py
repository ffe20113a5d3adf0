"""What ``convert`` does (the command is declared in cli/app.py): on a Dask cluster, with worker
processes that write their ranks' ETs (a local run directory, issue 26 item 4), or in this
process (one file, a URL, or a run too small for worker processes)."""

from __future__ import annotations

from pathlib import Path

from charllm_trace.cli.progress import input_progress
from charllm_trace.converters.run_dir import convert_path, summary_lines
from charllm_trace.core.errors import InputError
from charllm_trace.engine import Cluster
from charllm_trace.et.writer import write_run
from charllm_trace.inputs.convert_ranks import convert_write_run
from charllm_trace.inputs.localize import localize_input, url_errors, url_output
from charllm_trace.inputs.urls import is_url


def convert_lines(
    path: str, output: str, host_et: str | None, workers: int | None, *, gz: bool, force: bool,
    cluster: Cluster | None = None,
) -> list[str]:
    """Convert ``path`` into ``output``; the lines to print (one per rank, then the files written)."""
    if cluster is not None and host_et is None:  # each rank converted and written by a worker
        from charllm_trace.engine.driver import convert_distributed

        lines, paths = convert_distributed(path, output, cluster=cluster, gz=gz, force=force)
        return [*lines, f"wrote {len(paths)} Chakra ET file(s) to {output}"]
    done = None
    if host_et is None and not is_url(path) and not is_url(output) and Path(path).is_dir():
        with input_progress("converting"):  # worker processes write their ranks' ETs
            done = convert_write_run(path, output, workers=workers, force=force, gz=gz)
    lines, paths = done if done is not None else _in_this_process(path, output, host_et, workers, gz, force)
    return [*lines, f"wrote {len(paths)} Chakra ET file(s) to {output}"]


def _in_this_process(
    path: str, output: str, host_et: str | None, workers: int | None, gz: bool, force: bool
) -> tuple[list[str], list[Path]]:
    with input_progress("converting"):
        if is_url(path):
            local = localize_input(path)
            with url_errors(path, local):
                run = convert_path(local, host_et=host_et, workers=workers)
        else:
            run = convert_path(path, host_et=host_et, workers=workers)
    if is_url(output) and not force:
        from charllm_trace.engine.driver import existing_rank_files

        if existing_rank_files(output):
            raise InputError(
                output, "already holds rank-<N>.et files; refusing to overwrite them (use --force)"
            )
    with url_output(output) as out:
        paths = write_run(run, out, overwrite=force, gz=gz)
    return summary_lines(run), paths
