"""Terminal tables that fit the console without cutting a number.

A :class:`FitTable` is filled like a ``rich.table.Table`` (``add_column``, ``add_row``,
``add_section``) and decides how to draw itself when printed, from the width the console
offers:

- the whole table when it fits;
- otherwise the columns are split into several tables, one under the other, each repeating
  the table's key columns (the first ``keys`` columns: rank, step, type...), so every row stays
  readable and no number is ever cut or wrapped;
- text columns marked ``shrink`` (operator and kernel names) may be shortened first, from the
  middle (``shorten_middle``: both ends of a name survive, so two names that share a long
  prefix still read differently); numbers never are.

``Console(width=...)`` sets the budget: 80 columns for a pipe or a narrow terminal, the
terminal's width otherwise, unlimited with the CLI's ``--wide``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

#: Width of a text column marked ``shrink`` below which it is never shortened.
MIN_SHRINK = 24


def shorten_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: its start and its end joined by an ellipsis."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = (width - 1) // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def _around_difference(text: str, start: int, width: int) -> str:
    """``text`` in ``width`` cells: its first few characters, then the part from ``start`` (where
    it differs from names it would otherwise read like), ellipses where text is left out."""
    head = min(max(width // 4, 1), start)
    rest = width - head - 1
    part = text[start : start + rest]
    if start + rest < len(text):
        part = part[: rest - 1] + "…"
    return text[:head] + "…" + part if start > head else text[: head + len(part)]


def shorten_names(cells: list[str], width: int) -> list[str]:
    """Each of ``cells`` in at most ``width`` cells, from the middle (``shorten_middle``); names
    that would then read the same though they differ show, after their start, the part where
    they begin to differ."""
    out = [shorten_middle(c, width) for c in cells]
    groups: dict[str, set[str]] = {}
    for c, o in zip(cells, out, strict=True):
        groups.setdefault(o, set()).add(c)
    for o, originals in groups.items():
        if len(originals) < 2 or width < 8:
            continue
        names = sorted(originals)
        alt = {}
        for n in names:  # from just before where n parts from the name most like it
            lcp = max(len(os.path.commonprefix([n, m])) for m in names if m != n)
            alt[n] = _around_difference(n, max(lcp - 4, 0), width)
        out = [alt.get(c, x) if x == o else x for c, x in zip(cells, out, strict=True)]
    return out


def _cell_width(c: str | Text) -> int:
    text = c.plain if isinstance(c, Text) else c
    return max((cell_len(line) for line in text.split("\n")), default=0)


@dataclass
class FitColumn:
    header: str | Text
    justify: str = "right"
    shrink: bool = False  # a text column that may be shortened with an ellipsis
    max_width: int | None = None  # cap on a shrinkable column, whatever the room
    group: int | None = None  # columns of one group are never split apart (diff's A, B, change)
    wrap: bool = False  # a text column that may be narrowed by wrapping its text onto more lines
    cells: list[str | Text] = field(default_factory=list)

    def natural(self) -> int:
        w = max([_cell_width(self.header), *(_cell_width(c) for c in self.cells)])
        return min(w, self.max_width) if self.max_width and self.shrink else w


class FitTable:
    """A table that splits its columns into several tables rather than cut a number.

    ``compact`` draws no vertical borders (two spaces between columns); otherwise rich's
    default box is used when the table fits, and the compact style when it must be split."""

    def __init__(self, title: str = "", keys: int = 1, compact: bool = True) -> None:
        self.title = title
        self.keys = keys
        self.compact = compact
        self.columns: list[FitColumn] = []
        self.caption: str | None = None  # a line under the table (under its last part)
        self.show_header = True
        self._sections: list[int] = []  # row indices before which a section line is drawn

    def add_column(self, header: str | Text, justify: str = "right", *, shrink: bool = False,
                   max_width: int | None = None, group: int | None = None,
                   wrap: bool = False) -> None:  # fmt: skip
        self.columns.append(FitColumn(header, justify, shrink or wrap, max_width, group, wrap=wrap))

    def add_row(self, *cells: Any) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        for col, c in zip(self.columns, cells, strict=True):
            col.cells.append(c if isinstance(c, Text) else "" if c is None else str(c))

    def add_section(self) -> None:
        self._sections.append(self.row_count)

    @property
    def row_count(self) -> int:
        return len(self.columns[0].cells) if self.columns else 0

    # -- layout ---------------------------------------------------------------------------------
    def _width(self, widths: list[int], compact: bool) -> int:
        """Characters a rich table of these column widths takes."""
        n = len(widths)
        if compact:  # box.SIMPLE_HEAD, padding (0, 1) collapsed, no edge: two spaces apart
            return sum(widths) + 2 * max(n - 1, 0)
        return sum(widths) + 3 * n + 1  # "│ " + cell + " " per column, closing "│"

    def _widths(
        self, budget: int, cols: list[int], compact: bool, floor: int = MIN_SHRINK
    ) -> list[int] | None:
        """Column widths of ``cols`` within ``budget`` (shrinking text columns), or None."""
        widths = [self.columns[i].natural() for i in cols]
        over = self._width(widths, compact) - budget
        if over <= 0:
            return widths
        for k, i in enumerate(cols):
            c = self.columns[i]
            if c.shrink and widths[k] > floor:
                take = min(over, widths[k] - floor)
                widths[k] -= take
                over -= take
        return widths if over <= 0 else None

    def parts(self, budget: int) -> list[tuple[list[int], list[int]]]:
        """Groups of column indices (with their widths) that each fit ``budget``."""
        everything = list(range(len(self.columns)))
        whole = self._widths(budget, everything, self.compact)
        if whole is not None:
            return [(everything, whole)]
        keys = everything[: self.keys]
        units: list[list[int]] = []  # columns that stay together
        for i in everything[self.keys :]:
            g = self.columns[i].group
            if units and g is not None and self.columns[units[-1][0]].group == g:
                units[-1].append(i)
            else:
                units.append([i])
        groups: list[list[int]] = []
        cur: list[int] = []
        for u in units:
            if cur and self._widths(budget, keys + cur + u, True) is None:
                groups.append(cur)
                cur = []
            cur.extend(u)
        if cur:
            groups.append(cur)
        out = []
        for g in groups:
            w = self._widths(budget, keys + g, True) or self._widths(budget, keys + g, True, floor=4)
            if w is None:  # a column wider than the budget: drawn whole, never cut
                w = [self.columns[i].natural() for i in keys + g]
            out.append((keys + g, w))
        return out

    def _rich(self, cols: list[int], widths: list[int], title: str, compact: bool) -> Table:
        if compact:
            t = Table(
                title=title or None, title_justify="left", title_style="bold", header_style="bold",
                box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False,
            )  # fmt: skip
        else:
            t = Table(title=title or None, title_justify="left", title_style="bold", header_style="bold")
        t.show_header = self.show_header
        for i, w in zip(cols, widths, strict=True):
            c = self.columns[i]
            t.add_column(
                c.header, justify=c.justify, no_wrap=not c.wrap,  # type: ignore[arg-type]
                overflow="ellipsis" if c.shrink and not c.wrap else "fold", width=w, min_width=w,
            )  # fmt: skip
        cells = [self.columns[i].cells for i in cols]
        for k, (i, w) in enumerate(zip(cols, widths, strict=True)):
            c = self.columns[i]
            if c.shrink and not c.wrap and all(isinstance(x, str) for x in c.cells):
                cells[k] = shorten_names(c.cells, w)  # type: ignore[arg-type]
        for r in range(self.row_count):
            if r in self._sections and r > 0:
                t.add_section()
            t.add_row(*(col[r] for col in cells), end_section=False)
        return t

    def tables(self, budget: int) -> Iterator[Text | Table]:
        """The title (a line of its own, never squeezed into a narrow part) and each part."""
        parts = self.parts(budget)
        for n, (cols, widths) in enumerate(parts):
            title = self.title
            if len(parts) > 1:
                title = f"{self.title} ({n + 1}/{len(parts)})" if self.title else f"({n + 1}/{len(parts)})"
            if title:
                yield Text(title, style="bold")
            yield self._rich(cols, widths, "", self.compact or len(parts) > 1)
        if self.caption:
            yield Text(self.caption, style="dim")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.tables(options.max_width)


#: The width ``--wide`` gives: every table whole, on one line per row.
WIDE = 100_000


def table_console(wide: bool = False, **kw: Any) -> Console:
    """The console the commands print tables on: the terminal's width (80 columns when piped,
    or ``COLUMNS``), or unlimited with ``--wide``."""
    return Console(width=WIDE, **kw) if wide else Console(**kw)
