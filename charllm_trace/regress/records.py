"""The JSON form of the regression records (metrics, changes, diff sections, sweep columns): their
fields by name, in the order the JSON lists them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def fields_dict(
    obj: object, names: Iterable[str], renamed: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``{name: obj.<name>}`` for each of ``names`` in order; ``renamed`` maps a JSON name to the
    attribute that holds it when they differ (``class`` -> ``cls``)."""
    attr = renamed or {}
    return {name: getattr(obj, attr.get(name, name)) for name in names}
