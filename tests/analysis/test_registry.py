"""The analysis registry (issue 23 items 2 and 5): every analysis declared once, the loops over it,
the per-rank context that classifies and cuts steps once, columns declared as data and saved
results checked by msgspec against the result types' declarations."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import zipfile
from pathlib import Path

import msgspec
import polars as pl
import pytest

import charllm_trace.analysis.step_windows as sw
import charllm_trace.core.classify as cl
from charllm_trace.analysis import registry
from charllm_trace.analysis.api import (
    AnalyzeOptions,
    analyze_run,
    energy,
    flops,
    idle_time,
    launch_stats,
    overlap,
    power,
    time_breakdown,
)
from charllm_trace.analysis.bandwidth import collectives
from charllm_trace.analysis.columns import Col, columns, markdown_table, row_struct
from charllm_trace.analysis.context import RankContext
from charllm_trace.analysis.frame_schemas import ALL_FRAMES, FRAME_SCHEMAS, OPTIONAL_FRAMES
from charllm_trace.analysis.results import RunAnalysis
from charllm_trace.core.errors import InputError
from charllm_trace.inputs import loader
from charllm_trace.render.export import to_json
from charllm_trace.store.results import ADDED_RESULTS, RESULT_TYPES, read_results, results_bytes
from tests.helpers.results_helpers import with_telemetry

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"
H200 = FIXTURES / "h200-1rank-nccl"
GLOO = FIXTURES / "cpu-2rank-gloo"


def test_every_result_of_a_run_is_registered_once() -> None:
    fields = [f.name for f in dataclasses.fields(RunAnalysis)]
    names = [a.name for a in registry.ANALYSES]
    assert len(set(names)) == len(names)
    # the registry's order is RunAnalysis' own: the order of saved results and of the notes
    assert names == [n for n in fields if n in names]
    assert set(fields) - set(names) == {"skipped", "ranks", "simulated", "source", "options", "extra"}
    frames = [f.name for a in registry.ANALYSES for f in a.frames]
    assert len(set(frames)) == len(frames) and list(ALL_FRAMES) == frames
    # every document carries the frames of the analyses that are not optional, the others only
    # where the run has their data
    optional = {a.name for a in registry.ANALYSES if a.optional}
    assert optional == {"cpu_wait", "graph_launches"}
    assert list(FRAME_SCHEMAS) == [f for f in frames if ALL_FRAMES[f][0] not in optional]
    assert list(OPTIONAL_FRAMES) == [f for f in frames if ALL_FRAMES[f][0] in optional]
    assert dict(RESULT_TYPES) == {a.name: a.result for a in registry.ANALYSES}
    # the results of version 1's first files, the rest added since (read as None from older files)
    assert set(names) - set(ADDED_RESULTS) == {
        "overlap",
        "bandwidth",
        "energy",
        "power",
        "critical_path",
        "what_if",
    }


@pytest.mark.parametrize("a", registry.ANALYSES, ids=lambda a: a.name)
def test_each_entry_names_what_exists(a: registry.Analysis) -> None:
    hints = {f.name: f.type for f in dataclasses.fields(a.result)}
    for f in a.frames:
        assert hints[f.attr] in ("pl.DataFrame", pl.DataFrame), f"{a.name}.{f.attr} is not a frame"
        assert isinstance(f.columns, dict) and f.columns
    for ref in (a.rank, a.merge, a.table, a.html):
        if ref is not None:
            assert callable(registry.resolve(ref)), ref
    assert a.merge is not None, "every analysis has a merge (or the result would never be set)"
    assert (a.table is None) == (a.table_at is None) and (a.html is None) == (a.html_at is None)


def test_the_run_order_is_the_order_analyze_run_had() -> None:
    """Per rank and in the merge (``skipped`` keeps this order in the JSON document)."""
    order = [a.name for a in registry.in_steps()]
    assert order == [
        "overlap",
        "idle_time",
        "launch",
        "bandwidth",
        "energy",
        "power",
        "breakdown",
        "critical_path",
        "what_if",
        "flops",
        "pipeline",
        "comm_wait",
        "phase_power",
        "iterations",
        "dims",
        "config",
        "cpu_wait",
        "graph_launches",
    ]
    shown = [a.name for a, _ in registry.shown("table")]
    assert shown[:4] == ["overlap", "bandwidth", "energy", "power"] and "launch" not in shown


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts calls of ``classify`` and ``step_windows`` through every module that holds them."""
    seen = {"classify": 0, "step_windows": 0}
    for name, mod0 in (("classify", cl), ("step_windows", sw)):
        real = getattr(mod0, name)

        def counting(*a, _real=real, _name=name, **k):  # type: ignore[no-untyped-def]
            seen[_name] += 1
            return _real(*a, **k)

        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("charllm_trace") and getattr(mod, name, None) is real:
                monkeypatch.setattr(mod, name, counting)
    return seen


def _everything(src: object) -> None:
    overlap(src, per_step=True)
    collectives(src)
    energy(src, per_step=True)
    power(src, per_step=True)
    flops(src, per_step=True)
    idle_time(src, per_step=True)
    launch_stats(src, per_step=True)
    time_breakdown(src, per_step=True)


def test_analyses_given_a_context_classify_and_cut_steps_once(counted: dict[str, int]) -> None:
    tr = with_telemetry(loader.load(H200)).traces[0]
    ctx = RankContext.of(tr)
    assert counted == {"classify": 1, "step_windows": 0}
    _everything(ctx)
    # one classification (the context's) and one set of step windows for nine analyses
    assert counted == {"classify": 1, "step_windows": 1}
    assert "phase" in ctx.classified.columns  # energy's phases, added to the context once


def test_a_bare_trace_gets_a_context_of_its_own(counted: dict[str, int]) -> None:
    tr = loader.load(H200).traces[0]
    overlap(tr, per_step=True)
    assert counted["classify"] == 1


def test_results_from_a_context_equal_those_from_the_trace() -> None:
    tr = with_telemetry(loader.load(H200)).traces[0]
    ctx = RankContext.of(tr)
    for fn in (overlap, energy, power, flops, time_breakdown):
        a, b = fn(tr, per_step=True), fn(ctx, per_step=True)
        for f in dataclasses.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            assert x.equals(y) if isinstance(x, pl.DataFrame) else x == y, f"{fn.__name__}.{f.name}"


def test_columns_are_declared_once_with_their_descriptions() -> None:
    t = columns(Col("rank", pl.Int64), Col("busy_ns", pl.Int64, "ns", "time with activity"))
    assert dict(t) == {"rank": pl.Int64, "busy_ns": pl.Int64}
    assert pl.DataFrame(schema=t).schema == pl.Schema(t)  # a polars schema as it is
    assert "| `busy_ns` | Int64 | ns | time with activity |" in markdown_table(t)
    with pytest.raises(ValueError, match="duplicate"):
        columns(Col("a", pl.Int64), Col("a", pl.Float64))
    doc = msgspec.json.schema(row_struct("f", t))
    assert doc["$defs"]["f"]["properties"]["busy_ns"]["description"] == "time with activity"
    assert doc["$defs"]["f"]["additionalProperties"] is False


def test_every_row_of_the_json_document_converts_to_its_declared_row() -> None:
    """msgspec checks each frame's rows of ``analyze --format json`` against the same declarations
    the schema is generated from; a row with a column of another type or an extra column fails."""
    res = analyze_run(with_telemetry(loader.load(GLOO)), AnalyzeOptions(per_step=True))
    doc = json.loads(to_json(res))
    n = 0
    for name, (_field, cols) in FRAME_SCHEMAS.items():
        rows = doc["frames"][name]
        msgspec.convert(rows, list[row_struct(name, cols)], strict=True)
        n += len(rows)
    assert n > 100
    row = dict(doc["frames"]["overlap"][0])
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**row, "span_ns": "12"}, row_struct("overlap", FRAME_SCHEMAS["overlap"][1]))
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**row, "extra": 1}, row_struct("overlap", FRAME_SCHEMAS["overlap"][1]))


def _tampered(data: bytes, edit) -> bytes:  # type: ignore[no-untyped-def]
    """The results file ``data`` with its manifest's analysis edited (checksums still right:
    the value's type is what is wrong)."""
    zin = zipfile.ZipFile(io.BytesIO(data))
    body = json.loads(zin.read("charllm-results.json"))
    edit(body["analysis"])
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("charllm-results.json", json.dumps(body))
        for n in zin.namelist():
            if n != "charllm-results.json":
                zf.writestr(n, zin.read(n))
    return out.getvalue()


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (lambda a: a["options"].__setitem__("per_step", 1), "options"),
        (lambda a: a["options"].__setitem__("breakdown_top", True), "options"),
        (lambda a: a.__setitem__("ranks", ["0", "1"]), "analysis"),
        (lambda a: a["overlap"]["values"].__setitem__("notes", "one note"), "overlap"),
        (lambda a: a["bandwidth"]["values"]["peaks"]["0"].__setitem__("gbps", "fast"), "bandwidth"),
        (lambda a: a["bandwidth"]["values"]["peaks"]["0"].__setitem__("extra", 1), "bandwidth"),
        (lambda a: a["bandwidth"]["values"]["peaks"]["0"].pop("link"), "bandwidth"),
    ],
)
def test_saved_values_of_another_type_are_refused(tmp_path: Path, edit, what: str) -> None:  # type: ignore[no-untyped-def]
    res = analyze_run(loader.load(GLOO), AnalyzeOptions(per_step=True, critical_path=False))
    data = results_bytes(res)
    assert (
        read_results(tmp_path / "ok.zip", data).analysis.bandwidth.peaks["0"].link
        == res.bandwidth.peaks["0"].link
    )
    with pytest.raises(InputError, match=f"bad.zip: {what}"):
        read_results(tmp_path / "bad.zip", _tampered(data, edit))


def test_saved_values_are_kept_as_written(tmp_path: Path) -> None:
    """msgspec checks the types; the values are the ones saved (an integer peak stays an integer)."""
    res = analyze_run(loader.load(GLOO), AnalyzeOptions(critical_path=False, peak_gbps=100))
    back = read_results(tmp_path / "r.zip", results_bytes(res)).analysis
    assert back.options.peak_gbps == 100 and isinstance(back.options.peak_gbps, int)
    assert to_json(back) == to_json(res)


def test_the_committed_column_tables_are_the_generated_ones() -> None:
    """docs/columns.md is generated from the declarations (regenerate: python -c 'from
    charllm_trace.render.contract import columns_markdown; print(columns_markdown(), end="")'
    > docs/columns.md)."""
    from charllm_trace.render.contract import columns_markdown

    docs = Path(__file__).parents[2] / "docs" / "columns.md"
    assert docs.read_text() == columns_markdown()
    # every frame of the JSON document is there, with its columns
    for name, (_field, cols) in FRAME_SCHEMAS.items():
        assert f"### `{name}`" in docs.read_text() and all(f"| `{c}` |" in docs.read_text() for c in cols)


def test_the_what_if_replay_classifies_no_rank_again(counted: dict[str, int]) -> None:
    """``--what-if comm=100GB/s`` re-times collectives by their message size
    (``bandwidth.collectives`` of every rank): from the classification ``analyze_run`` made, not
    a second one. (The re-timed traces the replay measures its overlap on are other node tables,
    classified on their own, with or without a bandwidth key.)"""
    run = loader.load(GLOO)
    analyze_run(run, AnalyzeOptions(what_if={"comm": 0.5}))
    plain = counted["classify"]
    counted["classify"] = 0
    res = analyze_run(run, AnalyzeOptions(what_if={"comm": 0.5, "comm_gbps": 1.0}))
    assert res.what_if is not None and res.what_if.steps.height
    assert counted["classify"] == plain


@pytest.fixture
def toy():  # type: ignore[no-untyped-def]
    """The toy analysis of tests/helpers/registry_toy.py, registered for one test."""
    from tests.helpers import registry_toy

    registry.register(registry_toy.ENTRY)
    yield registry_toy
    registry.unregister("node_count")


def test_an_analysis_added_by_one_module_and_one_registration(toy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Registered, with no other change: computed per rank and merged, in the JSON document (its
    frame always present, and in the schema), its notes, saved and read back, printed and drawn."""
    from charllm_trace.render.contract import analyze_schema
    from charllm_trace.render.report import render_report, report_data
    from charllm_trace.render.tables import render_analysis

    run = loader.load(GLOO)
    res = analyze_run(run, AnalyzeOptions(critical_path=False))
    want = {r: (run.traces[r].nodes.height, 0) for r in run.ranks}  # a CPU run: no GPU kernel
    got = {r: (n, k) for r, n, k in res.node_count.per_rank.iter_rows()}
    assert got == want and res.extra["node_count"] is res.node_count
    doc = json.loads(to_json(res))
    assert [row["n_nodes"] for row in doc["frames"]["node_count"]] == [n for n, _ in want.values()]
    assert doc["notes"]["node_count"] == ["ranks 0-1: counted by the toy analysis"]
    assert "node_count" in analyze_schema()["properties"]["frames"]["required"]
    back = read_results(tmp_path / "r.zip", results_bytes(res)).analysis
    assert back.node_count.per_rank.equals(res.node_count.per_rank) and to_json(back) == to_json(res)
    buf = io.StringIO()
    from rich.console import Console

    render_analysis(res, Console(file=buf, width=200))
    assert f"node count: {sum(n for n, _ in want.values())} nodes" in buf.getvalue()
    assert 'id="node-count"' in render_report(report_data(run, res))
    # saved before the analysis existed: read with it None and a reason
    registry.unregister("node_count")
    old = results_bytes(res)
    registry.register(toy.ENTRY)
    older = read_results(tmp_path / "old.zip", old).analysis
    assert older.node_count is None and "not in this results file" in older.skipped["node_count"]


def test_the_registry_refuses_a_name_twice() -> None:
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.BY_NAME["flops"])


def test_an_optional_analysis_without_data_leaves_no_frame_and_no_reason() -> None:
    """cpu_wait and graph_launches are optional: a CPU run without scheduler telemetry or graph
    launches has neither result, no frame of theirs in the document and no skipped reason; the
    schema names their frames without requiring them. The others' frames are all there."""
    from charllm_trace.render.contract import analyze_schema

    res = analyze_run(loader.load(GLOO), AnalyzeOptions(critical_path=False))
    assert res.cpu_wait is None and res.graph_launches is None
    doc = json.loads(to_json(res))
    optional = ["cpu_wait", "cpu_wait_idle", "cpu_wait_phases", "graph_launches", "graph_launch_kernels"]
    assert not set(optional) & set(doc["frames"]) and not {"cpu_wait", "graph_launches"} & set(doc["skipped"])
    assert list(doc["frames"]) == list(FRAME_SCHEMAS)
    frames = analyze_schema()["properties"]["frames"]
    assert set(optional) <= set(frames["properties"]) and not set(optional) & set(frames["required"])
