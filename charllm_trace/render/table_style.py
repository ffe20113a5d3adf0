"""The look shared by the terminal tables of ``charllm-trace analyze``: the plain rich table of the
per-analysis renderers and the label of a simulated timeline. Formatting only."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console

from charllm_trace.render.fit import FitTable


def simulated_label(res: Any) -> str:
    """`` [SIMULATED]`` after a table title when ``res`` (a ``RunAnalysis``) has a simulated
    timeline (the trace has no timestamps), else nothing."""
    return " [SIMULATED]" if res.simulated else ""


def plain_table(
    title: str, cols: Iterable[tuple[str, str]], *, shrink: int | None = None, max_width: int | None = None
) -> FitTable:
    """A table with a bold left title and a simple head: ``cols`` are (name, justify). A
    :class:`~charllm_trace.render.fit.FitTable`: too wide for the console, it is split into parts
    that repeat the first column rather than cut a number; column ``shrink`` (a name) may be
    shortened from the middle, to at most ``max_width``."""
    t = FitTable(title, keys=1)
    for i, (name, just) in enumerate(cols):
        t.add_column(name, just, shrink=i == shrink, max_width=max_width if i == shrink else None)
    return t


def dim_line(console: Console, text: str, style: str | None = "dim") -> None:
    """A dim line (a note, a legend) wrapped at the console's width with a hanging indent: the
    lines after the first start two columns right of the first's text, never at column 0."""
    lead = len(text) - len(text.lstrip(" "))
    width = console.size.width
    lines = textwrap.wrap(
        text.strip(), width=max(width - lead, 20), subsequent_indent="  ",
        break_long_words=False, break_on_hyphens=False,
    ) or [""]  # fmt: skip
    for line in lines:
        console.print(
            " " * lead + line, style=style, markup=False, highlight=False, overflow="ignore", crop=False
        )


def legend(console: Console, text: str, notes: Iterable[str] = ()) -> None:
    """A table's legend (a dim line), then each of the analysis' notes on a dim line of its own."""
    dim_line(console, text)
    for n in notes:
        dim_line(console, f"  note: {n}")


def when_present(
    name: str, render: Callable[[Any, Console], None], blank: bool = True
) -> Callable[[Any, Console], None]:
    """The analysis registry's terminal renderer of the analysis ``name``: ``render(res, console)``
    and (``blank``) an empty line, only where ``res`` (a ``RunAnalysis``) holds its result."""

    def table(res: Any, console: Console) -> None:
        if getattr(res, name) is not None:
            render(res, console)
            if blank:
                console.print()

    table.__doc__ = f"The tables of ``{name}``, only where it has a result (the registry's renderer)."
    return table
