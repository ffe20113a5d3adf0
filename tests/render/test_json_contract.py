"""The JSON contract (issue 14, item 3): every document names its schema and version, the JSON
Schemas under docs/schema/ validate real outputs, every frame is always present, one name per
statistic, diff's CPU time is exclusive, duplicate step numbers are reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.render.contract import analyze_schema
from tests.conftest import FIXTURES, shared_trace
from tests.helpers.schema import schema_valid

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schema"
RUN = FIXTURES / "cpu-2rank-gloo"
BASELINE = FIXTURES / "cpu-2rank-gloo.baseline.json"


def _schema(kind: str) -> dict:
    return json.loads((SCHEMAS / f"{kind}.schema.json").read_text())


def _validate(kind: str, doc: dict) -> None:
    schema_valid(_schema(kind), doc)
    assert doc["schema"] == f"charllm-trace/{kind}" and isinstance(doc["version"], int)


def _json(*args: str) -> dict:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_the_committed_analyze_schema_is_the_generated_one() -> None:
    """docs/schema/analyze.schema.json is generated from the frames' column tables (regenerate:
    python -c 'import json; from charllm_trace.render.contract import analyze_schema;
    print(json.dumps(analyze_schema(), indent=2))' > docs/schema/analyze.schema.json)."""
    assert json.loads((SCHEMAS / "analyze.schema.json").read_text()) == analyze_schema()


def test_every_column_of_every_frame_is_described() -> None:
    frames = analyze_schema()["properties"]["frames"]["properties"]
    undocumented = [
        f"{f}.{c}"
        for f, s in frames.items()
        for c, p in s["items"]["properties"].items()
        if c not in ("rank", "step", "name", "coll_type", "pg_name", "pg_desc", "dim", "count", "key")
        and not p.get("description")
    ]
    # columns whose name says all (ids, plain counts) may go without a comment; most have one
    assert len(undocumented) < 0.5 * sum(len(s["items"]["properties"]) for s in frames.values()), undocumented


@pytest.mark.parametrize(
    "extra", [[], ["--per-step", "--what-if", "comm=0.5"], ["--what-if", "gemm=2,comm=100GB/s,cpu_op+=5us"]]
)
def test_analyze_json_validates_on_the_collected_run(cache_dir, extra) -> None:
    _validate("analyze", _json("analyze", str(RUN), "--json", *extra))


def test_analyze_json_validates_on_shared_traces(cache_dir) -> None:
    for rel in (
        "hta/a100_ddp_nccl_rank0.json.gz",
        "param/dlrm_8ranks_v100",
        "hta/mi250_minitoy_kineto.json.gz",
    ):
        doc = _json("analyze", str(shared_trace(rel)), "--json")
        _validate("analyze", doc)


def test_every_frame_is_always_present_with_the_reason_when_empty(cache_dir) -> None:
    doc = _json("analyze", str(shared_trace("hta/a100_ddp_nccl_rank0.json.gz")), "--json")
    assert set(analyze_schema()["properties"]["frames"]["required"]) <= set(doc["frames"])
    assert doc["frames"]["energy"] == [] and doc["frames"]["power"] == []
    assert "telemetry" in doc["skipped"]["energy"]
    assert doc["frames"]["what_if"] == [] and doc["skipped"]["what_if"] == "not requested"


def test_info_check_diff_documents_validate(cache_dir) -> None:
    _validate("info", _json("info", str(RUN), "--json"))
    _validate("check", _json("check", str(RUN), "--baseline", str(BASELINE), "--json"))
    _validate("diff", _json("diff", str(RUN), str(RUN), "--json"))


def test_one_name_per_statistic(cache_dir) -> None:
    """analyze's aggregate busbw is time-weighted, diff's and the baseline's are medians: they
    were both called busbw (0.4196 vs 0.336 for one all_reduce)."""
    doc = _json("analyze", str(RUN), "--json")
    row = doc["frames"]["bandwidth"][0]
    assert "busbw_time_weighted_gbps" in row and "busbw_gbps" not in row
    d = _json("diff", str(RUN), str(RUN), "--json")
    coll = next(s for s in d["sections"] if s["name"] == "collectives")
    assert "busbw_median" in coll["values"] and "busbw" not in coll["values"]
    b = _json("check", str(RUN), "--baseline", str(BASELINE), "--json", "--all")
    keys = [c["key"] for c in b["changes"]]
    assert any(k.startswith("busbw_median_gbps/") for k in keys)
    assert not any(k.startswith("busbw_gbps/") for k in keys)


def test_a_baseline_written_before_the_rename_still_checks(tmp_path, cache_dir) -> None:
    """Baselines recorded with the old key ``busbw_gbps/...`` are read under the new name."""
    doc = json.loads(BASELINE.read_text())
    n = 0
    for m in doc["metrics"]:
        if m["key"].startswith("busbw_median_gbps/"):
            m["key"] = "busbw_gbps/" + m["key"].removeprefix("busbw_median_gbps/")
            n += 1
    assert n
    old = tmp_path / "old.baseline.json"
    old.write_text(json.dumps(doc))
    b = _json("check", str(RUN), "--baseline", str(old), "--json")
    assert b["ok"] is True and b["counts"].get("missing", 0) == 0 and b["counts"].get("new", 0) == 0


def test_diff_cpu_operator_time_is_exclusive(cache_dir) -> None:
    """The CPU-only run: an op's time excludes its CPU children (nested ops counted twice before)."""
    import polars as pl

    from charllm_trace.inputs.loader import load

    d = _json("diff", str(RUN), str(RUN), "--json")
    ops = next(s for s in d["sections"] if s["name"] == "operators")
    assert ops["rows"] and all(r["where"] == "cpu" for r in ops["rows"])
    nodes = pl.concat(
        [t.nodes.filter(~pl.col("on_gpu") & (pl.col("kind") == "cpu_op")) for t in load(str(RUN))]
    )
    per = nodes.group_by("name").agg(
        pl.col("self_ns").sum() / 1e6, pl.col("dur_ns").sum().alias("incl") / 1e6
    )
    per = {r["name"]: r for r in per.iter_rows(named=True)}
    nested = 0
    for r in ops["rows"]:
        assert r["time_a"] == pytest.approx(per[r["name"]]["self_ns"], rel=1e-9)
        nested += per[r["name"]]["incl"] > per[r["name"]]["self_ns"] * 1.01
    assert nested  # some listed ops have children: inclusive time would differ


def test_duplicate_step_numbers_are_reported(tmp_path, cache_dir) -> None:
    from tests.bad_inputs import valid

    doc = valid.kineto_doc()
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps
    copy = dict(steps[0])
    copy["ts"] = steps[0]["ts"] + steps[0]["dur"] + 10_000
    doc["traceEvents"].append(copy)
    p = valid.dump(tmp_path / "dup.json", doc)
    out = _json("analyze", str(p), "--json")
    notes = [n for ns in out["notes"].values() for n in ns]
    name = steps[0]["name"]
    assert any(f"{name} appears 2 times" in n for n in notes), notes


def test_the_validator_is_not_vacuous() -> None:
    """The schema check the tests above use refuses a wrong type deep in a frame, a missing
    required key and a schema that is not a schema."""
    schema = _schema("info")
    doc = _json("info", str(RUN), "--json")
    schema_valid(schema, doc)
    with pytest.raises(AssertionError, match="required"):
        schema_valid(schema, {k: v for k, v in doc.items() if k != "schema"})
    with pytest.raises(AssertionError, match="not of type"):
        schema_valid({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}},
                     {"a": [1, 2, "3"]})  # fmt: skip
    with pytest.raises(Exception, match="not valid|is not"):
        schema_valid({"type": 7}, {})
