"""The ``charllm-trace`` command: a thin click layer over the library.

Commands parse options, call one library function, and hand the result to a
renderer. Exit codes: 0 success, 1 a ``check`` found a regression, 2 bad input
(one line on stderr naming the file and the problem; ``--debug`` adds the
traceback), 3 an internal error.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from charllm_trace.errors import InputError

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class _Group(click.Group):
    """Turns library exceptions into one-line messages and exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except InputError as exc:
            if debug:
                traceback.print_exc()
            click.echo(f"error: {exc.one_line()}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:  # a bug: still one line unless --debug
            if debug:
                traceback.print_exc()
            first = " ".join(str(exc).split())[:300]
            click.echo(
                f"internal error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="charllm-trace")
def main(debug: bool) -> None:
    """Power, performance and thermal analysis of distributed training traces."""


# Each command lives in its own section below; keep them thin.

# --- info (issue 2) --------------------------------------------------------

# --- convert (issue 3) -----------------------------------------------------

# --- collect (issue 4) -----------------------------------------------------

# --- analyze (issue 5) -----------------------------------------------------

# --- baseline / check / diff / report / export / sanitize (issue 6) --------

# export / sanitize / report (issue 6) ...................................


def _refuse_existing(path: str, force: bool) -> None:
    import os

    if os.path.lexists(path) and not force:
        raise InputError(path, "already exists; pass --force to overwrite it")


@main.group("export")
def export_group() -> None:
    """Export a run to other tools' formats."""


@export_group.command("perfetto")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(), help="Chrome-trace JSON (.json or .json.gz).")
@click.option("--no-flows", is_flag=True, help="Leave out the launch arrows from CPU ops to GPU kernels.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
def export_perfetto(run: str, output: str, no_flows: bool, force: bool) -> None:
    """Write RUN as a Chrome-trace JSON for the Perfetto UI (ui.perfetto.dev): one process per
    rank, one track per CPU thread and GPU stream, power/temperature/clock counters per GPU."""
    from charllm_trace import loader
    from charllm_trace.render.perfetto import write_chrome_trace

    _refuse_existing(output, force)
    stats = write_chrome_trace(loader.load(run), output, flows=not no_flows)
    click.echo(
        f"wrote {output}: {stats.ranks} ranks, {stats.tracks} tracks, {stats.slices} slices, "
        f"{stats.counter_samples} counter samples, {stats.flows} launch flows"
        + (f" ({stats.skipped_untimed} nodes without a start time left out)" if stats.skipped_untimed else "")
    )

# end export / sanitize / report (issue 6) ...............................


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
