"""The types of a finding (``analysis/findings.py``): a sentence and the facts it states."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl


@dataclass(frozen=True)
class Fact:
    """One number of a finding: ``frame[row where all of ``where`` hold][column]``."""

    frame: str
    where: tuple[tuple[str, Any], ...]
    column: str
    value: Any
    text: str  # how the sentence writes it


@dataclass
class Finding:
    section: str  # the report section it belongs to (its anchor)
    text: str
    facts: list[Fact] = field(default_factory=list)


def fact(frame: str, row: dict[str, Any], keys: tuple[str, ...], column: str, text: str) -> Fact:
    return Fact(frame, tuple((k, row[k]) for k in keys), column, row[column], text)


def ms(ns: float) -> str:
    """A duration in ns as a finding writes it: milliseconds, one decimal."""
    return f"{ns / 1e6:,.1f} ms"


def top_row(
    df: pl.DataFrame, by: str, keys: tuple[str, ...], *, nulls_last: bool = False
) -> dict[str, Any] | None:
    """The row of ``df`` with the largest ``by`` (ties: the smallest ``keys``, in order), the one
    a finding speaks of; None when ``df`` has no row."""
    if df.height == 0:
        return None
    order = df.sort([by, *keys], descending=[True] + [False] * len(keys), nulls_last=nulls_last)
    return order.row(0, named=True)
