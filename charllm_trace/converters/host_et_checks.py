"""Checks on a host execution trace's nodes that the parser alone would take silently (issue 28).

The parser keeps what PyTorch writes and turns odd values into "none" (a parent of ``1e30``, an
``rf_id`` of ``"abc"``, ``inputs`` that are a string); these checks refuse such a file with one line
naming it: nodes that are not objects with an integer id, parents, record-function ids, thread ids
and scopes that are not integers, inputs and outputs that are neither an object (schema 1.1) nor a
list (1.0), and parents that form a cycle (found by pointer doubling on the whole parent column:
log2(n) numpy gathers, no walk per node).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.core.errors import InputError


def node_objects(path: str | os.PathLike[str], nodes: list[Any]) -> list[dict[str, Any]]:
    """The nodes, each an object with an integer id; ``InputError`` when any is not."""
    raw = [n for n in nodes if isinstance(n, dict) and type(n.get("id")) is int]
    if len(raw) != len(nodes):
        bad = len(nodes) - len(raw)
        raise InputError(path, f"{bad:,} of {len(nodes):,} host ET nodes are not objects with an integer id")
    return raw


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _attr(node: dict[str, Any], name: str) -> Any:
    attrs = node.get("attrs")
    if isinstance(attrs, list):
        for a in attrs:
            if isinstance(a, dict) and a.get("name") == name:
                return a.get("value")
    return None


def _fields(node: dict[str, Any]) -> dict[str, Any]:
    """The node's integer fields as written: at the top (schema 1.0) or in ``attrs`` (1.1)."""
    if isinstance(node.get("inputs"), dict) or "ctrl_deps" in node:
        out = {"ctrl_deps": node.get("ctrl_deps")}
        out.update((k, _attr(node, k)) for k in ("rf_id", "tid", "scope"))
        return out
    return {k: node.get(k) for k in ("parent", "rf_id", "tid", "scope")}


def check_fields(path: str | os.PathLike[str], raw: list[dict[str, Any]]) -> None:
    """``InputError`` naming the first node whose parent, rf_id, tid or scope is given but is not a
    64-bit integer, or whose inputs or outputs are neither an object nor a list."""
    for n in raw:
        for key in ("inputs", "outputs"):
            v = n.get(key)
            if v is not None and not isinstance(v, dict | list):
                raise InputError(
                    path, f"host ET node {n['id']}: {key} is {_show(v)}, expected an object or a list"
                )
        for key, v in _fields(n).items():
            if v is not None and (type(v) is not int or not -(2**63) <= v < 2**63):
                raise InputError(path, f"host ET node {n['id']}: {key} is {_show(v)}, expected an integer")


def check_parent_cycle(path: str | os.PathLike[str], nodes: pl.DataFrame) -> None:
    """``InputError`` when the parents (``parent`` column, ids of nodes of the table) form a cycle."""
    n = nodes.height
    par = nodes["parent"]
    if n < 2 or par.null_count() == n:
        return
    ids = nodes["id"].to_numpy()
    order = np.argsort(ids, kind="stable")
    p = par.fill_null(-1).to_numpy()
    up = np.full(n, -1, dtype=np.int64)
    has = p >= 0
    up[has] = order[np.searchsorted(ids[order], p[has])]
    # after k rounds up[i] is the 2**k-th ancestor of i (-1: none); a chain without a cycle is
    # shorter than n, so a node that still has an ancestor 2**k >= n steps up reaches a cycle
    for _ in range(int(np.ceil(np.log2(n))) + 1):
        up = np.where(up >= 0, up[np.maximum(up, 0)], -1)
        if not (up >= 0).any():
            return
    k = int((up >= 0).sum())
    first = int(ids[np.flatnonzero(up >= 0)[0]])
    raise InputError(
        path, f"the host ET's parents (ctrl_deps) form a cycle: {k:,} nodes lie on or under it (node {first})"
    )
