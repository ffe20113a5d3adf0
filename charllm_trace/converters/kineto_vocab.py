"""Distinct names and categories of the Kineto reader, and which of them may be communication."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.converters.kineto_profile import CATEGORY_KIND

_CPU_KINDS = [c for c, (k, _) in CATEGORY_KIND.items() if k in ("cpu_op", "annotation")]

#: Case-insensitive superset of what ``may_be_comm`` looks for (an ASCII letter in the lower-cased
#: name comes from that letter in either case), so only these rows need the exact test.
COMM_HINT = r"(?i)nccl|rccl|msccl|hccl|record_param_comms|c10d::|gloo:|mpi:|ucc:"


def comm_candidates(name_s: pl.Series, cat_s: pl.Series, hint: pl.Series | None = None) -> pl.Series:
    """Positions of the events ``may_be_comm`` accepts, computed on whole columns. ``hint`` may
    pass ``name_s.str.contains(COMM_HINT)`` when the caller has it. (The reader takes the same two
    steps: the hint per distinct name, then ``comm_hits`` on those rows.)"""
    pre = (name_s.str.contains(COMM_HINT) if hint is None else hint).arg_true()
    if pre.len() == 0:
        return pre
    return pre.gather(comm_hits(name_s.gather(pre), cat_s.gather(pre)))


def lower_distinct(s: pl.Series) -> pl.Series:
    """``s.str.to_lowercase()``, lower-casing only the distinct values (categories repeat a lot)."""
    u = s.unique()
    lu = u.str.to_lowercase()
    changed = u.ne_missing(lu)
    if not changed.any():
        return s
    return s.replace(u.filter(changed), lu.filter(changed))


def comm_hits(name_s: pl.Series, cat_s: pl.Series) -> pl.Series:
    lname = name_s.str.to_lowercase()
    known = cat_s.is_in(list(CATEGORY_KIND))
    kernel = cat_s == "kernel"
    cpu_like = cat_s.is_in(_CPU_KINDS) | ~known  # cpu_op, annotation, or an unknown category ("other")
    # a category we do not list may be an accelerator's device activity (kineto_devices)
    hit = ((kernel | ~known) & lname.str.contains("nccl|rccl|msccl|hccl")) | (
        cpu_like
        & (
            (lname == "record_param_comms")
            | lname.str.contains(r"^(?:c10d::|nccl:|gloo:|rccl:|hccl:|mpi:|ucc:)")
        )
    )
    return hit.arg_true()


class Vocab:
    """Strings stored once: each event's value becomes a code into a growing list of distinct
    values (a dict lookup per event, no per-batch column), and the column is those values
    gathered by code at the end. Gathering shares the values' bytes, so a name repeated a
    million times costs one 16-byte view per row, not a copy each.

    Values are taken as ``parse_kineto`` takes them (None -> "", anything else by ``str``), lower-cased
    with polars when ``lower`` (as ``lower_distinct``); ``flags`` keeps, per distinct value, whether
    ``pattern`` matches it."""

    def __init__(self, pattern: str | None = None, lower: bool = False) -> None:
        self.index: dict[str | None, int] = {}  # raw value (str or None) -> code
        self.codes: dict[str, int] = {}  # value -> code
        self.values: list[str] = []  # code -> value
        self.pattern = pattern
        self.regex = re.compile(pattern) if pattern is not None else None
        self.lower = lower
        self.flags = np.zeros(0, dtype=bool)
        self.odd: Any = None  # the first value seen that is neither a string nor None (kineto_checks)

    def encode(self, raw: list[Any]) -> np.ndarray:
        try:
            return np.fromiter(map(self.index.__getitem__, raw), dtype=np.uint32, count=len(raw))
        except (KeyError, TypeError):
            pass
        try:
            new = {v for v in set(raw) if v not in self.index}
            plain = all(v is None or v.__class__ is str for v in new)
        except TypeError:  # an unhashable value (a list or dict as a name)
            plain = False
        if not plain:  # numbers, lists ...: every value as its string
            if self.odd is None:
                self.odd = next((v for v in raw if v is not None and v.__class__ is not str), None)
            raw = ["" if v is None else str(v) for v in raw]
            new = {v for v in set(raw) if v not in self.index}
        keys = sorted(new, key=lambda v: (v is not None, v or ""))
        norm = ["" if v is None else v for v in keys]
        if self.lower:
            # ASCII lower-cases the same in Python and polars; anything else as polars does
            if all(v.isascii() for v in norm):
                norm = [v.lower() for v in norm]
            else:
                norm = pl.Series(norm, dtype=pl.String).str.to_lowercase().to_list()
        added = []
        for k, v in zip(keys, norm, strict=True):
            c = self.codes.get(v)
            if c is None:
                c = self.codes[v] = len(self.values)
                self.values.append(v)
                added.append(v)
            self.index[k] = c
        if self.pattern is not None and added:
            # Python's re on the few new values (polars' regex costs a few ms a call); the flags
            # only choose the rows the exact test (comm_hits, in polars) looks at, and re's
            # case-insensitive match of these ASCII literals takes every spelling polars' does
            hit = np.array([self.regex.search(v) is not None for v in added], dtype=bool)
            self.flags = np.concatenate([self.flags, hit])
        return np.fromiter(map(self.index.__getitem__, raw), dtype=np.uint32, count=len(raw))

    def value_series(self, codes: np.ndarray) -> pl.Series:
        return pl.Series([self.values[c] for c in codes.tolist()], dtype=pl.String)

    def decode(self, parts: list[np.ndarray]) -> pl.Series:
        codes = pl.Series(np.concatenate(parts) if parts else np.zeros(0, np.uint32), dtype=pl.UInt32)
        parts.clear()
        return pl.Series(self.values, dtype=pl.String).gather(codes)
