"""The JSON contract: every JSON document a command prints names its ``schema`` and ``version``,
and ``docs/schema/<kind>.schema.json`` describes it (JSON Schema, draft 2020-12).

``analyze``'s schema is generated here from the frames' column tables
(:mod:`charllm_trace.analysis.frame_schemas`), with each column's description taken from the
comment beside it in :mod:`charllm_trace.analysis.results`, so the documentation cannot drift
from the code (a test compares the committed file with :func:`analyze_schema`). The other
documents' schemas are written by hand and validated against real outputs in the tests.

Versioning: ``version`` is bumped when a key is removed or renamed or its meaning changes;
adding a frame, a column or a key keeps the version (readers must ignore keys they do not know
at the top level; frames' columns are closed so the schema documents every one).
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import polars as pl

#: document kind -> version of its layout
VERSIONS: dict[str, int] = {"analyze": 2, "info": 1, "check": 1, "diff": 1, "compare": 1}


def stamp(kind: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``schema`` and ``version`` first."""
    return {"schema": f"charllm-trace/{kind}", "version": VERSIONS[kind], **doc}


def _json_type(dtype: pl.DataType) -> dict[str, Any]:
    if dtype.is_integer():
        t: dict[str, Any] = {"type": ["integer", "null"]}
    elif dtype.is_float():
        t = {"type": ["number", "null"]}
    elif dtype == pl.Boolean:
        t = {"type": ["boolean", "null"]}
    elif isinstance(dtype, pl.List):
        t = {"type": ["array", "null"], "items": _json_type(dtype.inner)}
    else:
        t = {"type": ["string", "null"]}
    return t


def column_comments(modules: list[Any] | None = None) -> dict[str, dict[str, str]]:
    """``{SCHEMA_NAME: {column: comment}}`` from the source of the modules defining the frames'
    column tables (default: the result types)."""
    from charllm_trace.analysis import results

    out: dict[str, dict[str, str]] = {}
    for mod in modules or [results]:
        out.update(_comments(inspect.getsource(mod)))
    return out


def _comments(src: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for m in re.finditer(r"^(\w+_SCHEMA): dict\[str, pl\.DataType\] = \{\n(.*?)^\}", src, re.S | re.M):
        cols: dict[str, str] = {}
        last = None
        for line in m.group(2).splitlines():
            c = re.match(r'\s*"(\w+)": [^#]*?(?:#\s*(.*))?$', line)
            if c:
                last = c.group(1)
                cols[last] = (c.group(2) or "").strip()
            elif last is not None and (cont := re.match(r"\s*#\s*(.*)$", line)):
                cols[last] = (cols[last] + " " + cont.group(1).strip()).strip()
        out[m.group(1)] = cols
    return out


def _frame_schema(columns: dict[str, pl.DataType], comments: dict[str, str]) -> dict[str, Any]:
    props = {}
    for name, dtype in columns.items():
        p = _json_type(dtype)
        if comments.get(name):
            p["description"] = comments[name]
        props[name] = p
    return {
        "type": "array",
        "items": {
            "type": "object",
            "properties": props,
            "required": list(columns),
            "additionalProperties": False,
        },
    }


def analyze_schema() -> dict[str, Any]:
    """The JSON Schema of ``analyze --format json``."""
    from charllm_trace.analysis import frame_schemas
    from charllm_trace.analysis.frame_schemas import FRAME_SCHEMAS, OPTIONAL_FRAMES

    # each column table by its name, and the modules that define them (their comments are there)
    names: dict[int, str] = {}
    modules = []
    for k, v in vars(frame_schemas).items():
        if k.endswith("_SCHEMA") and isinstance(v, dict):
            names[id(v)] = k
    for mod_name in frame_schemas.DEFINED_IN:
        modules.append(importlib.import_module(mod_name))
    comments = column_comments(modules)
    frames = {}
    for name, (_field, cols) in {**FRAME_SCHEMAS, **OPTIONAL_FRAMES}.items():
        frames[name] = _frame_schema(cols, comments.get(names.get(id(cols), ""), {}))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://charllm-trace.dev/schema/analyze.schema.json",
        "title": "charllm-trace analyze --format json",
        "description": (
            "The analyses of a run. Every required frame is always present (an empty list when its "
            "analysis was not computed; skipped says why); the others (cpu_wait*) only where the run "
            "has their data (CPU scheduler telemetry). Times are integer ns, energy J, power W, "
            "bandwidth GB/s (GB = 1e9 bytes); null is unknown."
        ),
        "type": "object",
        "required": [
            "schema",
            "version",
            "source",
            "ranks",
            "simulated",
            "options",
            "skipped",
            "notes",
            "peaks",
            "frames",
        ],  # fmt: skip
        "properties": {
            "schema": {"const": "charllm-trace/analyze"},
            "version": {"const": VERSIONS["analyze"]},
            "source": {"type": ["string", "null"], "description": "the path analysed"},
            "ranks": {"type": "array", "items": {"type": ["integer", "null"]}},
            "simulated": {"type": "boolean", "description": "times rebuilt by --simulate, not measured"},
            "options": {"type": "object", "description": "the analysis options (AnalyzeOptions)"},
            "skipped": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "analysis -> why it was not computed (its frames are empty)",
            },
            "notes": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
                "description": "analysis -> its notes, in order",
            },
            "peaks": {
                "type": "object",
                "description": "process group -> the link peak used for utilisation",
                "additionalProperties": {
                    "type": "object",
                    "required": ["gbps", "link", "source", "spans_nodes"],
                    "properties": {
                        "gbps": {"type": ["number", "null"], "description": "per direction; null: unknown"},
                        "link": {"type": ["string", "null"]},
                        "source": {"type": "string", "description": "table | override | unknown | one rank"},
                        "spans_nodes": {"type": ["boolean", "null"]},
                    },
                },
            },
            "frames": {
                "type": "object",
                "required": list(FRAME_SCHEMAS),
                "properties": frames,
                "additionalProperties": False,
            },
            "what_if": _WHAT_IF,
        },
    }


_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
#: the ``what_if`` entry of ``analyze --format json`` (render/export.py; docs/analyses.md section 8)
_WHAT_IF = {
    "type": "object",
    "description": "with --what-if: the keys and what the PREDICTED figures rest on",
    "properties": {
        "predicted": {"type": "boolean"},
        "factors": {
            "type": "object",
            "description": "KEY: factor; NAME_gbps: a bandwidth in GB/s; cpu_op_add_ns: added ns per CPU op",
            "additionalProperties": {"type": "number"},
        },
        "fixed_wait_pct": {
            **_NUM,
            "description": "% of the measured whole-trace paths on waits kept as measured",
        },
        "inferred_pct": {**_NUM, "description": "% of the measured whole-trace paths on inferred edges"},
        "simulated": {"type": "boolean"},
        "n_steps": {"type": "integer", "description": "rank-steps the range is over (0: none)"},
        "step_ns": {
            "type": "object",
            "properties": {k: _INT for k in ("measured_median", "median", "low", "high")},
            "additionalProperties": False,
        },
        "change_pct": {
            "type": "object",
            "properties": {k: _NUM for k in ("median", "low", "high")},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
