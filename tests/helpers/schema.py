"""JSON Schema validation for the tests of our published schemas (docs/schema/).

jsonschema-rs (Rust, Draft 2020-12): validating ``analyze --json`` of the shared traces with the
pure-Python ``jsonschema`` took ~10 s of a profile of the heaviest fast tests (its ``descend``
per value), and importing it 1.2 s per worker."""

from __future__ import annotations

from typing import Any

import jsonschema_rs


def schema_valid(schema: dict[str, Any], doc: Any) -> None:
    """Assert ``schema`` is a valid Draft 2020-12 schema and ``doc`` conforms to it (the first
    errors named)."""
    jsonschema_rs.meta.validate(schema)
    errors = [
        f"{'/'.join(map(str, e.instance_path))}: {e.message}"
        for e in jsonschema_rs.Draft202012Validator(schema).iter_errors(doc)
    ]
    assert not errors, f"{len(errors)} schema violations, first: " + "; ".join(errors[:5])
