import polars as pl
import pytest

from charllm_trace.core.model import NODE_SCHEMA, ProcessGroup, Run, Trace, TraceMeta, conform


def _nodes() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": [1, 2, 3],
            "name": ["ProfilerStep#4", "aten::mm", "sm90_gemm"],
            "node_type": ["COMP", "COMP", "COMP"],
            "kind": ["annotation", "cpu_op", "kernel"],
            "on_gpu": [False, False, True],
            "start_ns": [1_000, 1_100, 1_500],
            "dur_ns": [10_000, 300, 2_000],
        }
    )


def test_conform_adds_missing_columns_with_model_types() -> None:
    df = conform(_nodes(), NODE_SCHEMA)
    assert df.columns == list(NODE_SCHEMA)
    assert df.schema["in_split"] == pl.List(pl.Int64)
    assert df["coll_type"].null_count() == 3


def test_conform_rejects_unknown_columns() -> None:
    with pytest.raises(ValueError, match="not in the model"):
        conform(_nodes().with_columns(pl.lit(1).alias("bogus")), NODE_SCHEMA)


def test_steps_from_profiler_step_annotations() -> None:
    t = Trace(nodes=_nodes())
    steps = t.steps()
    assert steps.to_dicts() == [{"step": 4, "start_ns": 1_000, "end_ns": 11_000}]


def test_steps_empty_without_timestamps() -> None:
    t = Trace(nodes=_nodes(), meta=TraceMeta(has_timestamps=False, clock="none"))
    assert t.steps().is_empty()


def test_meta_dict_round_trip_keeps_groups_and_unknown_keys() -> None:
    m = TraceMeta(rank=3, world_size=8, process_groups=(ProcessGroup("0", "default_pg", (0, 1, 2, 3)),))
    d = m.to_dict()
    d["future_field"] = "x"
    back = TraceMeta.from_dict(d)
    assert back.group("0") == ProcessGroup("0", "default_pg", (0, 1, 2, 3))
    assert back.group("0").size == 4
    assert back.extra == {"future_field": "x"}


def test_run_select_and_order() -> None:
    traces = {r: Trace(nodes=_nodes(), meta=TraceMeta(rank=r)) for r in (2, 0, 1)}
    run = Run(traces=traces)
    assert run.ranks == [0, 1, 2]
    assert [t.rank for t in run] == [0, 1, 2]
    assert run.select([1, 5]).ranks == [1]


def test_rank_ranges() -> None:
    from charllm_trace.core.model import rank_ranges

    assert rank_ranges([5, 0, 1, 2, 7, 8, 2]) == "0-2,5,7-8"
    assert rank_ranges([3]) == "3" and rank_ranges([]) == "none"
