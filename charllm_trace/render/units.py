"""Times in the tables and the report: integer ns as milliseconds or microseconds text, with the
mark a renderer shows for a missing value (one formatter; each renderer picks its mark and
digits)."""

from __future__ import annotations

from typing import Any


def ms(ns: Any, missing: str = "-", digits: int = 3, grouped: bool = False) -> str:
    """``ns`` nanoseconds as milliseconds with ``digits`` decimals (``grouped``: thousands
    separated by commas); ``missing`` for None."""
    return missing if ns is None else f"{ns / 1e6:{',' if grouped else ''}.{digits}f}"


def us(ns: Any, missing: str = "-", digits: int = 1, grouped: bool = False) -> str:
    """``ns`` nanoseconds as microseconds, as :func:`ms`."""
    return missing if ns is None else f"{ns / 1e3:{',' if grouped else ''}.{digits}f}"
