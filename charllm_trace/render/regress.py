"""Tables for ``check`` and ``diff`` (rich). Formatting only: every number is computed elsewhere."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from charllm_trace.render.fit import FitTable, table_console

if TYPE_CHECKING:
    from charllm_trace.regress.compare import Comparison, MetricChange
    from charllm_trace.regress.diff import RunDiff


def make_console(wide: bool = False) -> Console:
    """A console for check/diff output: the terminal's width (80 when piped), tables split into
    parts rather than cut; ``wide``: every table whole."""
    return table_console(wide)


_STATUS_STYLE = {
    "regressed": "bold red",
    "missing": "red",
    "improved": "green",
    "within": "dim",
    "new": "cyan",
}


def fmt_value(v: float | None, unit: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if unit == "%":
        return f"{v:.2f}%"
    s = f"{v:.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    return f"{s} {unit}" if unit else s


def fmt_change(ch: MetricChange) -> str:
    """Absolute change in the metric's unit (pp for %), and relative change for non-% metrics."""
    d = ch.delta
    if d is None:
        return "-"
    if ch.unit == "%":
        return f"{d:+.2f}pp"
    rel = ch.relative
    a = f"{'+' if d >= 0 else ''}{fmt_value(d, '')}"
    return a if rel is None else f"{a} ({rel * 100:+.1f}%)"


def check_table(cmp: Comparison, *, show_all: bool = False) -> FitTable:
    """The failing metrics (or every metric with ``show_all``): metric, old, new, change, tolerance."""
    rows = cmp.changes if show_all else cmp.failures
    title = "all metrics" if show_all else "regressions"
    t = FitTable(title, keys=1)
    t.add_column("metric", "left", shrink=True)
    t.add_column("status", "left")
    t.add_column("baseline")
    t.add_column("now")
    t.add_column("change")
    t.add_column("unit", "left")
    t.add_column("tolerance")
    for ch in rows:
        style = _STATUS_STYLE[ch.status]
        t.add_row(
            Text(ch.key),
            Text(ch.status, style=style),
            fmt_value(ch.old, ""),
            fmt_value(ch.new, ""),
            Text(fmt_change(ch), style=style if ch.status in ("regressed", "improved") else ""),
            ch.unit,
            ch.tolerance,
        )
    return t


def summary_line(cmp: Comparison) -> str:
    c = cmp.counts()
    n = sum(c.values())
    parts = ", ".join(f"{c[s]} {s}" for s in ("regressed", "missing", "improved", "within", "new") if c[s])
    verdict = "OK" if cmp.ok else "FAILED"
    return f"check {verdict}: {n} metrics ({parts or 'none'})"


def print_check(cmp: Comparison, console: Console, *, show_all: bool = False) -> None:
    if show_all or not cmp.ok:
        console.print(check_table(cmp, show_all=show_all))
    improved = cmp.by_status("improved")
    if improved and not show_all:
        console.print(f"{len(improved)} metric(s) improved beyond tolerance; consider a new baseline.")
    console.print(summary_line(cmp))


# ---------------------------------------------------------------------------
# diff
# ---------------------------------------------------------------------------


NAME_WIDTH = 48


def _short(name: str) -> str:
    """Long kernel names (C++ templates) cut to NAME_WIDTH characters."""
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"


def _cell(v: Any, unit: str) -> str:
    """A diff cell: the unit is in the column header, so only % is spelled out."""
    if v is None:
        return "-"
    return fmt_value(float(v), "%" if unit == "%" else "")


def _change(d: float | None, rel: float | None, unit: str) -> str:
    if d is None:
        return "-"
    if d == 0:
        return "0"
    if unit == "%":
        return f"{d:+.2f}pp"
    s = ("+" if d >= 0 else "") + _cell(d, unit)
    if rel is not None and math.isfinite(rel):
        s += f" ({rel * 100:+.1f}%)"
    return s


def diff_tables(diff: RunDiff, *, label_a: str = "A", label_b: str = "B") -> list[FitTable]:
    """One table per section: keys, then for each value A, B and the change (absolute and relative)."""
    tables = []
    for sec in diff.sections:
        t = FitTable(f"{sec.title}  ({label_a} → {label_b})", keys=len(sec.keys))
        for k in sec.keys:
            t.add_column(k, "left", shrink=True, max_width=NAME_WIDTH)
        for n, v in enumerate(sec.values):
            unit = sec.units.get(v, "")
            head = f"{v} [{unit}]" if unit and unit not in ("count", "%") else v
            t.add_column(Text(f"{head}\n{label_a}"), group=n)  # A, B and change stay together
            t.add_column(f"\n{label_b}", group=n)
            t.add_column("\nchange", group=n)
        for row in sec.frame.iter_rows(named=True):
            cells: list[Any] = [Text(_short("-" if row[k] is None else str(row[k]))) for k in sec.keys]
            for v in sec.values:
                unit = sec.units.get(v, "")
                cells += [
                    _cell(row[f"{v}_a"], unit),
                    _cell(row[f"{v}_b"], unit),
                    _change(row[f"{v}_delta"], row[f"{v}_rel"], unit),
                ]
            t.add_row(*cells)
        if sec.note:
            t.caption = sec.note
        tables.append(t)
    return tables


def print_diff(diff: RunDiff, console: Console, *, label_a: str = "A", label_b: str = "B") -> None:
    for t in diff_tables(diff, label_a=label_a, label_b=label_b):
        console.print(t)
    for line in diff.notes:
        console.print(f"note: {line}")
