"""converters/annotate.py: the vectorised walks and gathers that replace per-node work give what
the per-node forms give: the innermost ``charllm_pg:`` range around a node (``_Tree.nearest_marks``
against a walk up one node at a time), the prefetched names, the collective columns attached by
position (against the left join they replace), and the launch starts of lone device work."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from charllm_trace.converters import collectives as C
from charllm_trace.converters.annotate import _attach, _Tree
from charllm_trace.converters.collective_rows import _marked_group, mark_starts
from charllm_trace.converters.lone_collectives import _starts_of


def _walk_mark(tree: _Tree, names: list[str | None], s: int, limit: int = 128) -> str | None:
    """The oracle: the node, then its ancestors one at a time (at most ``limit``)."""
    chain = [s, *tree.ancestors(s, limit)]
    return next((names[a] for a in chain if (names[a] or "").startswith(C.PG_MARK)), None)


def _random_tree(seed: int, n: int = 400) -> tuple[_Tree, list[str | None]]:
    rng = np.random.default_rng(seed)
    parents = np.array([-1 if i == 0 or rng.random() < 0.05 else int(rng.integers(0, i)) for i in range(n)])
    pool = ["aten::mm", "nccl:all_reduce", f"{C.PG_MARK}tp", f"{C.PG_MARK}", f"{C.PG_MARK}dp", None]
    names = [pool[int(k)] for k in rng.choice(len(pool), n, p=[0.6, 0.15, 0.08, 0.02, 0.08, 0.07])]
    ids = np.arange(n, dtype=np.int64)
    return _Tree(ids, parents, pl.Series(names, dtype=pl.String)), names


@pytest.mark.parametrize("seed", range(6))
def test_nearest_marks_is_the_walk_up_one_node_at_a_time(seed: int) -> None:
    tree, names = _random_tree(seed)
    starts = np.r_[np.arange(len(names)), -1, len(names) + 5]  # every node, none, beyond the table
    got = tree.nearest_marks(starts)
    for s in range(len(names)):
        assert got.get(s) == _walk_mark(tree, names, s), s
    assert -1 not in got and len(names) + 5 not in got


def test_nearest_marks_stops_at_the_walk_limit() -> None:
    n = 140  # a chain 0 <- 1 <- ... <- 139, the mark at the root only
    tree = _Tree(np.arange(n), np.arange(-1, n - 1), pl.Series([f"{C.PG_MARK}g", *["op"] * (n - 1)]))
    got = tree.nearest_marks(np.array([128, 129, 139]), limit=128)
    assert got == {128: f"{C.PG_MARK}g"}  # 129 and 139 are more than 128 ancestors below it


def test_marked_group_takes_the_first_start_inside_a_range() -> None:
    marks = {5: f"{C.PG_MARK}tp", 7: f"{C.PG_MARK}"}
    assert _marked_group(marks, [-1, 5, 9]) == "tp"
    assert _marked_group(marks, [7, 5, 9]) is None  # an empty name ends the search, as before
    assert _marked_group(marks, [1, 2, 3]) is None
    # a gloo op's c10d start is the op that launched it when the walk found none
    assert mark_starts((-1, 4, -1), True, 9, {9: 3}) == (3, 4, 9)
    assert mark_starts((-1, 4, 6), True, 9, {9: 3}) == (6, 4, 9)
    assert mark_starts((-1, -1, -1), False, 9, {9: 3}) == (-1, -1, 9)


def test_prefetched_names_are_the_names() -> None:
    tree, names = _random_tree(1)
    tree.prefetch(np.array([3, 3, -1, 17, 399, 10_000]))
    for i in (3, 17, 399):
        assert tree._cache[i] == names[i]
    assert tree.name_of(42) == names[42]


def test_attach_by_position_is_the_left_join() -> None:
    ev = pl.DataFrame({"id": [4, 0, 2, 1, 3], "x": list("abcde")})
    narrow = pl.DataFrame(
        {"id": [3, 4], "v": [30, 40], "s": ["p", None], "l": [[1, 2], None]},
        schema_overrides={"l": pl.List(pl.Int64)},
    )
    pos = np.full(5, -1)
    pos[ev["id"].to_numpy()] = np.arange(5)
    got = _attach(ev, narrow, ["v", "s", "l"], pos)
    joined = ev.join(narrow, on="id", how="left", maintain_order="left")
    assert got.equals(joined)


def test_starts_of_gives_minus_one_for_missing_ids_and_null_starts() -> None:
    ev = pl.DataFrame({"id": [2, 0, 5], "start_ns": [20, None, 50]}, schema_overrides={"start_ns": pl.Int64})
    assert _starts_of(ev, np.array([5, 2, 0, 3, 9, -1])).tolist() == [50, 20, -1, -1, -1, -1]
