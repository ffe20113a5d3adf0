"""Integers from JSON values written by other tools (ids, sizes, counts, ranks)."""

from __future__ import annotations

from typing import Any


def int_value(v: Any, bools: bool = False, base: int = 10) -> int | None:
    """``v`` as an integer: an int, an integral float, or a string read by ``int(v, base)``
    (``base`` 0: with its 0x / 0o / 0b prefix); a bool is 0 / 1 with ``bools``, else None;
    anything else (a fraction, an unreadable string, a list, null) None."""
    if isinstance(v, bool):
        return int(v) if bools else None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v, base)
        except ValueError:
            return None
    return None
