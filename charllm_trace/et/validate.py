"""Checks on an ET's graph before anything walks it (issue 15: no silent acceptance).

Node ids are unique, every dependency names a node of the file, and the control dependencies
form no cycle. Each failure is an ``InputError`` naming the file and the first offending node; a cycle is
found in C (``core.dag.topo_order``, linear in nodes + edges).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from charllm_trace.core.errors import InputError
from charllm_trace.core.event_limit import check_event_count, max_events
from charllm_trace.core.limits import MAX_RANK
from charllm_trace.et import conventions as cv


def check_graph(trace: Any, path: str | os.PathLike[str] | None, ours: bool = True) -> None:
    """``InputError`` for repeated node ids, dependencies on absent nodes, and cycles.

    Chakra's own converter leaves dependencies on nodes it dropped (the shared
    ``feeder_tests_chakra.0.et`` has them) and nodes that depend on themselves: in a foreign
    file (``ours`` false) such edges are removed and counted in ``meta.extra``
    (``deps_on_absent_nodes``, ``deps_on_themselves``), not refused."""
    ids = trace.nodes["id"]
    if ids.null_count():
        raise InputError(path, f"{ids.null_count():,} node(s) have no id")
    if ids.is_duplicated().any():
        dup = ids.value_counts(sort=True).filter(pl.col("count") > 1)
        first, k = dup.row(0)
        raise InputError(
            path,
            f"node id {first} appears {k:,} times ({dup.height:,} ids repeated): node ids must be unique",
        )
    deps = trace.deps
    if not deps.height:
        return
    order = ids.arg_sort().to_numpy()
    sorted_ids = ids.to_numpy()[order]

    def find(col: str) -> tuple[np.ndarray, np.ndarray]:
        v = deps[col].to_numpy()
        pos = np.minimum(np.searchsorted(sorted_ids, v), max(len(sorted_ids) - 1, 0))
        found = sorted_ids[pos] == v if len(sorted_ids) else np.zeros(len(v), dtype=bool)
        return pos, found

    (pdep, fdep), (pnode, fnode) = find("dep"), find("node")
    absent = ~(fdep & fnode)
    if absent.any() and not ours:
        trace.meta.extra["deps_on_absent_nodes"] = int(absent.sum())
        keep = ~absent
        trace.deps = deps = deps.filter(pl.Series(keep))
        pdep, fdep, pnode, fnode = pdep[keep], fdep[keep], pnode[keep], fnode[keep]
        absent = absent[keep]
    if absent.any():
        i = int(np.flatnonzero(absent)[0])
        row = deps.row(i, named=True)
        if not fdep[i]:
            raise InputError(
                path, f"node {row['node']} depends on node {row['dep']}, which is not in the file"
            )
        raise InputError(path, f"a dependency names node {row['node']}, which is not in the file")
    loops = pdep == pnode
    if loops.any():  # a node that depends on itself: in Chakra-made files (383 in the shared one)
        if ours:
            row = deps.row(int(np.flatnonzero(loops)[0]), named=True)
            raise InputError(path, f"node {row['node']} depends on itself")
        trace.meta.extra["deps_on_themselves"] = int(loops.sum())
        keep = ~loops
        trace.deps = deps = deps.filter(pl.Series(keep))
        pdep, pnode = pdep[keep], pnode[keep]
    from charllm_trace.core.dag import topo_order

    # control dependencies (parent, issue order) of a file we wrote never form a cycle; tensor-data
    # ones can (the run graph drops the data edges that close one, with a note). Chakra's own
    # converter writes control cycles too (the shared feeder ET: 3396 <-> 3403): foreign files are
    # left to the graph code, which refuses a cycle it cannot break when it re-times (CycleError)
    if not ours or trace.meta.source == "chakra-et":  # foreign, or a foreign file we re-wrote
        return
    ctrl = (deps["kind"] == "ctrl").to_numpy()
    n = trace.nodes.height
    _, placed = topo_order(n, order[pdep[ctrl]], order[pnode[ctrl]], np.zeros(n, dtype=np.int64))
    if placed < n:
        raise InputError(path, f"the control dependencies form a cycle ({n - placed:,} nodes on or after it)")


#: node start times (ns since 1970) and durations an ET may hold: 0 <= start <= 2**62 (the year 2116)
#: and 0 <= dur <= 2**61 (73 years), so that every end and difference fits int64
MAX_ABS_START_NS = 1 << 62
MAX_DUR_NS = 1 << 61


def check_times(trace: Any, path: str | os.PathLike[str] | None) -> None:
    """``InputError`` for a negative duration or times no real trace has (they would overflow
    the int64 arithmetic of the analyses)."""
    nodes = trace.nodes
    bad = nodes.filter(
        (pl.col("dur_ns") < 0)
        | (pl.col("dur_ns") > MAX_DUR_NS)
        | (pl.col("start_ns") < 0)
        | (pl.col("start_ns") > MAX_ABS_START_NS)
    )
    _refuse_first(bad, path, _time_problem)
    _check_node_types(nodes, path)
    if "comm_bytes" in nodes.columns:
        _refuse_first(
            nodes.filter(pl.col("comm_bytes") < 0),
            path,
            lambda r, n: f"a negative comm_size ({r['comm_bytes']} bytes; {n:,} such nodes)",
        )


def _time_problem(r: dict[str, Any], n: int) -> str:
    if r["dur_ns"] is not None and r["dur_ns"] < 0:
        what = f"a negative duration ({r['dur_ns']} ns)"
    elif r["start_ns"] < 0:  # before 1970: spans between such starts and real ones pass int64
        what = f"a negative start ({r['start_ns']} ns, before 1970)"
    else:
        what = f"start {r['start_ns']} ns and duration {r['dur_ns']} ns, beyond any real trace"
    return f"{what} ({n:,} such nodes)"


def _refuse_first(
    bad: pl.DataFrame, path: str | os.PathLike[str] | None, problem: Callable[[dict[str, Any], int], str]
) -> None:
    """``InputError`` naming the first of the ``bad`` nodes and, by ``problem`` (its row, how many
    are bad), what is wrong with them; nothing when there are none."""
    if bad.height:
        r = bad.row(0, named=True)
        raise InputError(path, f"node {r['id']} ({r['name']!r:.60}) has {problem(r, bad.height)}")


def _check_node_types(nodes: pl.DataFrame, path: str | os.PathLike[str] | None) -> None:
    """Node types are Chakra's (METADATA_NODE .. COMM_COLL_NODE): a type past the enum (99) was read
    as INVALID_NODE, which no converter writes, and its node silently counted as nothing."""
    if "node_type" not in nodes.columns:
        return
    _refuse_first(
        nodes.filter(pl.col("node_type") == "INVALID"),
        path,
        lambda r, n: f"no Chakra node type (INVALID_NODE or a number past COMM_COLL_NODE; {n:,} such nodes)",
    )


def _producer(trace: Any) -> str:
    return "Chakra's converter" if trace.meta.source == "chakra-et" else "charllm-trace"


def one_producer(traces: dict[int, Any], origin: dict[int, Any]) -> None:
    """The ETs of one folder come from one converter: files of charllm-trace beside a file of
    Chakra's converter (no run metadata to tell its run) are two runs' files, not one run."""
    made = {r: _producer(t) for r, t in traces.items()}
    if len(set(made.values())) > 1:
        ours = min(r for r, m in made.items() if m == "charllm-trace")
        other = min(r for r, m in made.items() if m != "charllm-trace")
        raise InputError(
            origin[other],
            f"mixes two runs: made by Chakra's converter, but {origin[ours].name} was made by charllm-trace "
            "(the ranks of one run come from one converter)",
        )


def check_versions(gm: Any, path: Any) -> None:
    """The Chakra ET version (``GlobalMetadata.version``) and, in our files, the charllm-trace model
    version are ones this reader knows: Chakra 0.0.x, model 1.x."""
    from charllm_trace.core.model import MODEL_VERSION

    if gm.version and not re.fullmatch(r"0\.0\.\d+", gm.version):
        raise InputError(
            path,
            f"Chakra ET version {gm.version!r} is not supported (this charllm-trace reads 0.0.x; it writes {cv.ET_VERSION})",
        )
    _check_header_ints(gm, path)
    declared = next((_attr_value(a) for a in gm.attr if a.name == cv.M_NODE_COUNT), None)
    if type(declared) is int:  # refused before the nodes are decoded
        check_event_count(path, declared, max_events(), "nodes (declared in the header)")
    for a in gm.attr:
        if a.name == cv.M_MODEL_VERSION:
            v = _attr_value(a)
            major = MODEL_VERSION.split(".")[0]
            if not isinstance(v, str) or v.split(".")[0] != major:
                raise InputError(
                    path,
                    f"charllm-trace model version {v!r} is not supported (this charllm-trace reads {major}.x)",
                )


def check_node_count(gm: Any, n: int, path: Any) -> None:
    """Files we write record their node count: a file cut at a message boundary is found. Any
    file: no more nodes than ``event_limit`` allows (ours were checked before decoding)."""
    check_event_count(path, n, max_events(), "nodes")
    for a in gm.attr:
        if a.name == cv.M_NODE_COUNT:
            want = _attr_value(a)
            if want != n:
                raise InputError(
                    path, f"truncated: the header says {want:,} nodes, the file holds {n:,} (cut short?)"
                )


def _attr_value(a: Any) -> Any:
    """A scalar attribute's value (a list attribute: its message, never equal to a scalar)."""
    which = a.WhichOneof("value")
    return None if which is None else getattr(a, which)


#: header attributes that are whole numbers: name -> (lowest, highest + 1)
_HEADER_INTS = {cv.M_RANK: (0, MAX_RANK), cv.M_WORLD_SIZE: (1, MAX_RANK + 1), cv.M_DEVICE_INDEX: (0, 1 << 31)}


def _check_header_ints(gm: Any, path: Any) -> None:
    """The rank, world size and device index of our header are integers in range, rank < world
    (a string rank reached polars as text: exit 3)."""
    got = {a.name: _attr_value(a) for a in gm.attr if a.name in _HEADER_INTS}
    for name, v in got.items():
        lo, hi = _HEADER_INTS[name]
        if type(v) is not int or not lo <= v < hi:
            raise InputError(path, f"{name} is {v!r:.40}, expected an integer from {lo} to {hi - 1:,}")
    rank, world = got.get(cv.M_RANK), got.get(cv.M_WORLD_SIZE)
    if rank is not None and world is not None and rank >= world:
        raise InputError(path, f"{cv.M_RANK} {rank} is not below {cv.M_WORLD_SIZE} {world}")
