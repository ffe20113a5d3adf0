"""The ``charllm-trace`` command: a thin click layer over the library.

This module holds the click group, the exit-code handling and the registration of the commands;
each command lives in a module of its own under cli/ (cli/info.py, cli/convert.py,
cli/collect.py, cli/analyze.py, cli/regress.py, cli/export.py, cli/sanitize.py, ...). Commands
parse options, call one library function, and hand the result to a renderer. Exit codes: 0 success, 1 a ``check`` found a regression, 2 bad input
(one line on stderr naming the file and the problem; ``--debug`` adds the
traceback), 3 an internal error or a broken install (a compiled helper missing: one line naming
it and the fix).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from charllm_trace.cli.analyze import analyze_cmd, report_cmd
from charllm_trace.cli.cache import cache_group
from charllm_trace.cli.collect import collect_cmd
from charllm_trace.cli.compare import compare_cmd
from charllm_trace.cli.convert import convert_cmd
from charllm_trace.cli.cpu_wait import cpu_wait_cmd
from charllm_trace.cli.export import export_group
from charllm_trace.cli.info import info_cmd
from charllm_trace.cli.regress import (  # EXIT_REGRESSION: listed with the other exit codes; noqa: F401
    baseline_cmd,
    check_cmd,
    diff_cmd,
)
from charllm_trace.cli.sanitize import sanitize_cmd
from charllm_trace.cli.telemetry import telemetry_group
from charllm_trace.core.errors import InputError, debug_first, print_traceback
from charllm_trace.core.native_libs import NativeModuleMissing

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class _Group(click.Group):
    """Turns library exceptions into one-line messages and exit codes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # the command line as given: the printed-output cache's key (store/output_cache.py, cli/front.py)
        ctx.meta["argv"] = list(args)
        return super().parse_args(ctx, debug_first(args, self.commands))  # --debug after it too

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except InputError as exc:
            print_traceback(debug)
            click.echo(f"error: {exc.one_line()}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except NativeModuleMissing as exc:  # a broken install, not the user's input
            print_traceback(debug)
            click.echo(f"error: {' '.join(str(exc).split())}", err=True)
            ctx.exit(EXIT_INTERNAL)
        except Exception as exc:  # a bug: still one line unless --debug
            print_traceback(debug)
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
    # Process-wide tuning is the program's choice, not the library's: polars' allocator returns
    # freed memory sooner, and the C heap is trimmed after reads and builds (lower peak RSS;
    # charllm_trace/core/alloc.py). Nothing above has imported polars yet; a subcommand's own
    # imports do (when they do: a repeated analysis printed from the cache imports no polars).
    from charllm_trace.core.alloc import trim_heap_after_reads, tune_polars_allocator_on_import

    tune_polars_allocator_on_import()
    trim_heap_after_reads()


# One module per command (or group of commands); each is registered here, and `--help` lists them
# by name whatever the order below.
main.add_command(info_cmd)
main.add_command(convert_cmd)
main.add_command(collect_cmd)
main.add_command(analyze_cmd)
main.add_command(baseline_cmd)
main.add_command(check_cmd)
main.add_command(diff_cmd)
main.add_command(report_cmd)
main.add_command(cache_group)
main.add_command(telemetry_group)
main.add_command(cpu_wait_cmd)
main.add_command(compare_cmd)
main.add_command(export_group)
main.add_command(sanitize_cmd)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
