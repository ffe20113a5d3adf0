"""The reader's repeated-id check (``kineto_checks.check_events``): an id repeated among the events
of the one kind it is checked on is refused with the id, its count and how many ids repeat; the
same id on events of other kinds (a kernel shares its CPU op's External id) is not."""

from __future__ import annotations

import polars as pl
import pytest

from charllm_trace.converters.kineto_checks import check_events
from charllm_trace.core.errors import InputError


def _events(kinds: list[str], corr: list[int | None], ext: list[int | None]) -> pl.DataFrame:
    n = len(kinds)
    return pl.DataFrame(
        {
            "kind": kinds,
            "on_gpu": [k == "kernel" for k in kinds],
            "pid": [1] * n,
            "tid": [None if k == "kernel" else 2 for k in kinds],
            "correlation": pl.Series(corr, dtype=pl.Int64),
            "external_id": pl.Series(ext, dtype=pl.Int64),
        }
    )


def test_ids_shared_across_kinds_pass() -> None:
    # a runtime call, its kernel and its op share ids: each kind has each id once
    check_events("t.json", _events(["cpu_op", "runtime", "kernel"], [None, 7, 7], [5, 5, 5]))


def test_repeated_correlation_among_runtime_calls_is_refused() -> None:
    ev = _events(["runtime", "runtime", "runtime", "kernel", "runtime"], [7, 7, 7, 7, 9], [None] * 5)
    with pytest.raises(InputError, match=r"correlation id 7 is shared by 3 runtime calls \(1 ids repeated\)"):
        check_events("t.json", ev)


def test_repeated_external_id_among_cpu_ops_is_refused_nulls_aside() -> None:
    ev = _events(["cpu_op", "cpu_op", "cpu_op", "cpu_op", "kernel"], [None] * 5, [3, 3, None, None, 4])
    with pytest.raises(InputError, match=r"External id 3 is shared by 2 CPU ops \(1 ids repeated\)"):
        check_events("t.json", ev)
