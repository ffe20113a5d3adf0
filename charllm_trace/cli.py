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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
