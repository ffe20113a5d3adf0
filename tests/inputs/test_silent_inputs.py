"""Checks of issue 28 (round 3) beyond the corpus: the host ET's parent-cycle search against cases
whose answer is known, and no false refusal of the real profiles and host ETs other labs recorded."""

from __future__ import annotations

import polars as pl
import pytest

from charllm_trace.converters.host_et_checks import check_parent_cycle
from charllm_trace.core.errors import InputError
from tests.conftest import SHARED_TRACES


def _nodes(parents: list[int | None]) -> pl.DataFrame:
    n = len(parents)
    return pl.DataFrame(
        {"id": pl.Series([10 * i + 7 for i in range(n)], dtype=pl.Int64),
         "parent": pl.Series([None if p is None else 10 * p + 7 for p in parents], dtype=pl.Int64)}
    )  # fmt: skip


def test_a_chain_as_deep_as_the_trace_is_no_cycle() -> None:
    check_parent_cycle("h.json", _nodes([None] + list(range(4999))))  # node i's parent is i - 1


def test_a_tree_is_no_cycle() -> None:
    check_parent_cycle("h.json", _nodes([None] + [(i - 1) // 2 for i in range(1, 4096)]))


@pytest.mark.parametrize("length", [2, 3, 1000])
def test_a_cycle_and_what_hangs_under_it_are_counted(length: int) -> None:
    # nodes 0..length-1 form a ring; nodes past it hang under node 0 in a chain of 50; one more root
    parents: list[int | None] = [(i + 1) % length for i in range(length)]
    parents += [length - 1 + k if k else 0 for k in range(50)]
    parents.append(None)
    with pytest.raises(InputError, match=f"form a cycle: {length + 50:,} nodes lie on or under it"):
        check_parent_cycle("h.json", _nodes(parents))


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared (real traces) is absent")
def test_the_real_traces_of_other_labs_are_not_refused() -> None:
    from charllm_trace.converters.host_et import read_host_et
    from charllm_trace.converters.kineto import read_kineto

    files = sorted(SHARED_TRACES.rglob("*.json.gz"))
    assert files
    for f in files:
        if "host_et" in f.name:
            assert read_host_et(f).nodes.height > 0, f
        else:
            assert read_kineto(f).events.height > 0, f
