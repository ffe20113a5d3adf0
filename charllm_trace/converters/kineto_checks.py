"""Checks on a Kineto profile's complete events that the columns alone would take silently (issue 28).

The readers turn every event into columns (a name by ``str``, ids by ``int_or_none``); these checks
refuse, with one line naming the file, what no profiler writes and what would change results
without a word: an event whose name is missing or not a string, whose pid or (CPU) tid is not an
integer, an id that is not an integer (``"External id": "abc"``), and launch ids that repeat (a
runtime call's correlation id, a CPU op's External id: each pairs one launch with its GPU work or
one op with its host-ET node; the shared real profiles never repeat them). All checks run on whole
columns, or once per distinct value, never per event in Python.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import polars as pl

from charllm_trace.core.errors import InputError

#: the args keys behind the id columns, as the error names them
ID_KEYS = {
    "pid": "pid",
    "tid": "tid",
    "device": "args.device",
    "stream": "args.stream",
    "correlation": "args.correlation",
    "external_id": "args['External id']",
    "rf_id": "args['Record function id']",
}


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def check_name_value(path: str | os.PathLike[str], odd: Any, missing: bool) -> None:
    """``odd``: the first event name seen that is neither a string nor missing (None when none);
    ``missing``: whether an event had no name (or a null one)."""
    if missing:
        raise InputError(path, "a Kineto complete event has no name: not a profile PyTorch wrote")
    if odd is not None:
        raise InputError(path, f"a Kineto complete event's name is {_show(odd)}, expected a string")


def first_odd_name(names: Sequence[Any]) -> Any:
    """The first name in ``names`` that is neither a string nor None (the whole-document reader)."""
    return next((v for v in names if v is not None and v.__class__ is not str), None)


def check_id_values(
    path: str | os.PathLike[str], key: str, values: Sequence[Any], ints: Sequence[Any]
) -> None:
    """``ints`` are ``values`` read as integers (None where not): a value given but not read is refused."""
    bad = next((v for v, i in zip(values, ints, strict=True) if i is None and v is not None), None)
    if bad is not None:
        raise InputError(
            path, f"a Kineto event's {ID_KEYS.get(key, key)} is {_show(bad)}, expected an integer"
        )


def check_events(path: str | os.PathLike[str], events: pl.DataFrame) -> None:
    """The complete events' columns (after ``gpu_columns``): every event with an integer pid and every CPU event with an integer tid, launch ids not repeated."""
    if not events.height:
        return
    _check_missing(path, events)
    _check_repeated(path, events, "runtime", "correlation", "runtime calls", "correlation id")
    _check_repeated(path, events, "cpu_op", "external_id", "CPU ops", "External id")


def _check_missing(path: str | os.PathLike[str], events: pl.DataFrame) -> None:
    n = events.height
    counts = events.select(
        pl.col("pid").null_count().alias("pid"),
        (pl.col("tid").is_null() & ~pl.col("on_gpu")).sum().alias("tid"),
    ).row(0, named=True)
    for key, what in (("pid", "no integer pid"), ("tid", "no integer tid")):
        k = int(counts[key])
        if k:
            where = "CPU events" if key == "tid" else "complete events"  # GPU tids are streams
            raise InputError(path, f"{k:,} of {n:,} Kineto {where} have {what}: not a profile PyTorch wrote")


def _check_repeated(
    path: str | os.PathLike[str], events: pl.DataFrame, kind: str, col: str, what: str, label: str
) -> None:
    # the one column, not a filtered copy of every column of the events
    ids = events.select(pl.col(col).filter(pl.col("kind") == kind).drop_nulls()).to_series()
    if ids.len() == ids.n_unique():
        return
    dup = ids.value_counts(sort=True).filter(pl.col("count") > 1)
    first, k = dup.row(0)
    raise InputError(
        path,
        f"{label} {first} is shared by {k:,} {what} ({dup.height:,} ids repeated): each must be "
        "unique to pair a launch with its work",
    )
