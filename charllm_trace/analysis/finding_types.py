"""The types of a finding (``analysis/findings.py``): a sentence and the facts it states."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
