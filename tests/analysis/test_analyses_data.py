"""The analyses and their frames' columns declared as data (issue 23 items 2 and 5):
``charllm_trace/analysis/analyses.toml``, loaded by ``analysis/columns.py`` and
``analysis/registry.py``. The file is checked as it is loaded (a mistake is one error naming the
file and the place), every reference in it resolves, the module constants are its tables, and the
file is package data."""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from charllm_trace.analysis import registry
from charllm_trace.analysis.columns import (
    DATA_FILE,
    DeclarationError,
    declarations,
    frame_columns,
    parse_dtype,
    tables_of,
)
from charllm_trace.analysis.idle_results import IDLE_CATEGORIES, IDLE_TIME_SCHEMA
from charllm_trace.analysis.result_base import Result
from charllm_trace.analysis.results import CP_CATEGORIES, CRITICAL_PATH_SCHEMA, OVERLAP_GROUP_SCHEMA

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parents[2]


def test_the_dtype_grammar() -> None:
    assert parse_dtype("i64") is pl.Int64 and parse_dtype("f64") is pl.Float64
    assert parse_dtype("str") is pl.String and parse_dtype("bool") is pl.Boolean
    assert parse_dtype("list[str]") == pl.List(pl.String)
    assert parse_dtype("list[list[i32]]") == pl.List(pl.List(pl.Int32))
    for bad in ("int", "Int64", "list[int]", "list[i64", "", "i64 "):
        with pytest.raises(ValueError, match="unknown dtype"):
            parse_dtype(bad)


def test_every_reference_of_the_file_resolves() -> None:
    """Every result type, per-rank function, merge, renderer and column table named by an entry."""
    assert registry.unresolved() == []
    for a in registry.ANALYSES:
        assert dataclasses.is_dataclass(a.result), a.name
        assert registry.entry_of(a.result) is a


def test_the_module_constants_are_the_files_tables() -> None:
    for a in registry.ANALYSES:
        for f in a.frames:
            assert f.columns is frame_columns(f.name), f.name
    assert frame_columns("overlap_by_dim") is OVERLAP_GROUP_SCHEMA  # same_as
    # the columns named after a Python vocabulary are that vocabulary, in its order
    assert [c for c in CRITICAL_PATH_SCHEMA if c[:-3] in CP_CATEGORIES] == [f"{c}_ns" for c in CP_CATEGORIES]
    idle = [f"{c}_ns" for c in IDLE_CATEGORIES] + [f"{c}_pct" for c in IDLE_CATEGORIES]
    idle += [f"n_{c}" for c in IDLE_CATEGORIES]
    names = list(IDLE_TIME_SCHEMA)
    assert names[names.index(idle[0]) :][: len(idle)] == idle
    # what one row is, declared with the columns
    assert frame_columns("overlap").doc.startswith("One row per (rank, step)")


def test_a_results_frames_are_the_registrys() -> None:
    """``frames()`` of a result type is derived from its entry (declared once)."""
    a = registry.BY_NAME["comm_wait"]
    frames = {f.name: pl.DataFrame(schema=f.columns) for f in a.frames}
    got = a.result(*(frames[f.name] for f in a.frames)).frames()
    assert list(got) == ["comm_wait", "comm_wait_by_dim", "comm_wait_by_rank"]
    assert all(got[k] is frames[k] for k in got)

    @dataclasses.dataclass
    class Unregistered(Result):
        x: pl.DataFrame

    with pytest.raises(KeyError, match="no registered analysis"):
        Unregistered(pl.DataFrame()).frames()


def _data() -> dict[str, Any]:
    return copy.deepcopy(declarations())


def _first(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["analysis"][0]  # overlap


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: _first(d).__setitem__("colour", "red"), r"unknown field `colour`.*\$\.analysis\[0\]"),
        (lambda d: _first(d).pop("merge"), r"missing required field `merge`"),
        (lambda d: _first(d).__setitem__("step", "first"), r"Expected `int`.*\$\.analysis\[0\]\.step"),
        (lambda d: _first(d)["frame"][0].__setitem__("colour", 1), r"unknown field `colour`"),
        (lambda d: _first(d).__setitem__("merge", "rank_steps.merge"), r"analysis 'overlap'.*not a reference"),
        (lambda d: _first(d).pop("table_at"), r"analysis 'overlap'.*goes with its place"),
        (lambda d: d["analysis"].append({**_first(d), "frame": []}), r"analysis is declared twice"),
        (lambda d: _first(d)["frame"][0]["columns"][2].__setitem__(1, "int64"), r"frame 'overlap', column 'start_ns': unknown dtype 'int64'"),
        (lambda d: _first(d)["frame"][0]["columns"][2].append(3), r"frame 'overlap'.*2 to 4 strings"),
        (lambda d: _first(d)["frame"][0]["columns"].append(["rank", "i64"]), r"frame 'overlap'.*duplicate column"),
        (lambda d: _first(d)["frame"][0].__setitem__("columns", []), r"frame 'overlap': no columns"),
        (lambda d: _first(d)["frame"][2].__setitem__("same_as", "nothing"), r"same_as 'nothing'"),
        (lambda d: _first(d)["frame"][1].__setitem__("name", "overlap"), r"frame 'overlap': declared twice"),
    ],
)  # fmt: skip
def test_a_mistake_in_the_file_is_one_error_naming_it(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = _data()
    edit(doc)
    with pytest.raises(DeclarationError, match=message) as err:
        registry.entries_of(doc)
    assert str(err.value).startswith(f"{DATA_FILE}: ")
    assert registry.entries_of(_data())  # the file itself is fine


def test_the_unchanged_file_loads_as_the_registry() -> None:
    assert [a.name for a in registry.entries_of(_data())] == [a.name for a in registry.ANALYSES]
    assert registry.entries_of(_data()) == registry.ANALYSES
    assert list(tables_of(_data())) == list(tables_of(declarations()))


def test_the_file_is_package_data() -> None:
    """An installed wheel has it: setuptools' package-data patterns cover it."""
    assert resources.files("charllm_trace.analysis").joinpath(DATA_FILE).is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["charllm_trace"]
    assert any(fnmatch.fnmatch(f"analysis/{DATA_FILE}", p) for p in patterns)
    deps = pyproject["project"]["dependencies"]
    assert any(d.startswith("tomli") and "python_version < '3.11'" in d for d in deps)
