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
    from charllm_trace.core.errors import InputError

    given = given_options(ctx, (*allowed, "no_cache"))
    if given:
        raise InputError(
            path,
            f"saved results are drawn as they were analysed; {', '.join(given)} cannot change them "
            "(analyse the trace again with those options)",
        )


def refuse_existing(path: str, force: bool) -> None:
    """Check an output path before any work: an existing file is refused unless ``--force``; a
    directory, a missing or non-directory parent, or one that cannot be written to are refused
    (one line, exit 2) instead of failing after the whole analysis."""
    import os

    from charllm_trace.core.errors import InputError
    from charllm_trace.inputs.urls import is_url

    if is_url(path):  # an fsspec URL (docs/scale.md): refused when it exists, unless --force
        from charllm_trace.inputs import urls

        if urls.exists(path) and not force:
            raise InputError(path, "already exists; pass --force to overwrite it")
        return
    if os.path.lexists(path):
        if os.path.isdir(path):
            raise InputError(path, "is a directory; give a file name to write")
        if not force:
            raise InputError(path, "already exists; pass --force to overwrite it")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(parent):
        raise InputError(path, f"cannot be written: the directory {parent} does not exist")
    if not os.path.isdir(parent):
        raise InputError(path, f"cannot be written: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(path, f"cannot be written: no permission to write in {parent}")


def refuse_existing_save(save: str | None, force: bool) -> None:
    """Check a ``--save`` target before the analysis, not after it."""
    if save is not None:
        refuse_existing(save, force)


def wrote(path: Any) -> None:
    click.echo(f"wrote {path}", err=True)
