"""The collector's committed fixture run (tests/fixtures/traces/cpu-2rank-gloo) is whole and consistent."""

from __future__ import annotations

import gzip
import json

import polars as pl

from charllm_trace.collectors.manifest import read_manifest
from charllm_trace.collectors.telemetry import read_telemetry
from tests.conftest import FIXTURES

RUN = FIXTURES / "cpu-2rank-gloo"


def test_fixture_is_small_and_complete() -> None:
    total = sum(p.stat().st_size for p in RUN.iterdir())
    assert total <= 2_000_000
    m = read_manifest(RUN)
    assert m["status"] == "finished" and m["world_size"] == 2
    for files in m["files"]["ranks"].values():
        for name in files.values():
            assert (RUN / name).exists(), name
    for r in range(2):
        with gzip.open(RUN / f"rank-{r}.kineto.json.gz") as f:
            names = [e["name"] for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        traced = m["steps"]["traced"][str(r)]
        assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [
            f"ProfilerStep#{s}" for s in traced
        ]
        info = json.loads((RUN / f"rank-{r}.info.json").read_text())
        assert info["steps_traced"] == traced and len(info["step_end_ns"]) == info["steps_completed"]


def test_fixture_telemetry_says_no_source() -> None:
    tel = read_telemetry(RUN)
    assert tel.height == 0 and tel.schema["power_w"] == pl.Float64
    (meta,) = [json.loads(p.read_text()) for p in RUN.glob("telemetry-*.meta.json")]
    assert meta["source"] is None and "no NVIDIA driver" in meta["no_source_reason"]


def test_fixture_converts() -> None:
    from charllm_trace.converters.run_dir import convert_run

    run = convert_run(RUN, workers=1)
    assert run.ranks == [0, 1]
    for t in run:
        assert t.steps()["step"].to_list() == [2, 3]
        kinds = set(t.nodes["coll_type"].drop_nulls().unique().to_list())
        # no reduce_scatter: gloo runs it as a gloo:all_reduce, typed all_reduce
        assert {"all_gather", "all_to_all", "broadcast", "all_reduce"} <= kinds
