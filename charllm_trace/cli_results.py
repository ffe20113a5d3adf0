"""The CLI's side of saved results (``analyze --save``, ``analyze RESULTS``, ``report RESULTS``):
options, and the refusal of analysis options when redrawing saved results (docs/cache.md)."""

from __future__ import annotations

from typing import Any

import click

SAVE_HELP = (
    "Also save the results to this file (one zip), to print or report them again without the "
    "trace: 'analyze FILE', 'report FILE' (--force replaces it)."
)


def save_option(f: Any) -> Any:
    return click.option("--save", "save", type=click.Path(), default=None, metavar="FILE", help=SAVE_HELP)(f)


def given_options(ctx: click.Context, allowed: tuple[str, ...]) -> list[str]:
    """The command's options given on the command line (not defaults) other than ``allowed``."""
    from click.core import ParameterSource

    out = []
    for p in ctx.command.params:
        if p.name in allowed or p.name is None or isinstance(p, click.Argument):
            continue
        src = ctx.get_parameter_source(p.name)
        if src not in (None, ParameterSource.DEFAULT):
            out.append(p.opts[0])
    return out


def refuse_analysis_options(ctx: click.Context, path: str, allowed: tuple[str, ...]) -> None:
    """Saved results are drawn as they were analysed: options that would change the analysis are
    refused (one line, exit 2) rather than silently ignored."""
    from charllm_trace.errors import InputError

    given = given_options(ctx, (*allowed, "no_cache"))
    if given:
        raise InputError(
            path,
            f"saved results are drawn as they were analysed; {', '.join(given)} cannot change them "
            "(analyse the trace again with those options)",
        )


def refuse_existing(path: str, force: bool) -> None:
    """Refuse to replace an existing output file unless ``--force``."""
    import os

    from charllm_trace.errors import InputError

    if os.path.lexists(path) and not force:
        raise InputError(path, "already exists; pass --force to overwrite it")


def refuse_existing_save(save: str | None, force: bool) -> None:
    """Refuse an existing ``--save`` target before the analysis, not after it."""
    import os

    from charllm_trace.errors import InputError

    if save is not None and not force and os.path.lexists(save):
        raise InputError(save, "already exists; pass --force to overwrite it")


def wrote(path: Any) -> None:
    click.echo(f"wrote {path}", err=True)
