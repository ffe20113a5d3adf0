"""``compare RUN RUN RUN``: the sweep table against each run's own ``analyze --format json``
figures; sorting, best marking, labels, machine formats, the HTML page, bad inputs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.core.model import Run
from tests.conftest import FIXTURES
from tests.helpers.results_helpers import with_telemetry

GLOO = FIXTURES / "cpu-2rank-gloo"


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _stretch(run: Run, f: float) -> Run:
    """Every time of the run stretched by ``f`` from its first start (a slower run)."""
    out = {}
    for r, t in run.traces.items():
        s0 = int(t.nodes["start_ns"].min())
        nodes = t.nodes.with_columns(
            (s0 + (pl.col("start_ns") - s0) * f).round().cast(pl.Int64).alias("start_ns"),
            (pl.col("dur_ns") * f).round().cast(pl.Int64).alias("dur_ns"),
        )
        out[r] = dataclasses.replace(t, nodes=nodes)
    return Run(traces=out, manifest=run.manifest, source=run.source)


def _power(run: Run, f: float) -> Run:
    out = {
        r: dataclasses.replace(t, telemetry=t.telemetry.with_columns(pl.col("power_w") * f))
        for r, t in run.traces.items()
    }
    return Run(traces=out, manifest=run.manifest, source=run.source)


def _manifest(run: Run, **extra: Any) -> Run:
    return Run(traces=run.traces, manifest={**run.manifest, **extra}, source=run.source)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three variants of the collected gloo run, as ET directories: (fast) telemetry, a workload
    and a dp=2 layout in the manifest; (slow) 1.5x every time, 1.2x the power, twice the global
    batch; (bare) no telemetry, no workload."""
    from charllm_trace.et.writer import write_run
    from charllm_trace.inputs.loader import load

    base = load(GLOO, cache=False)
    d = tmp_path_factory.mktemp("sweep")
    fast = _manifest(with_telemetry(base), workload={"model": "tiny", "global_batch": 8, "seq_len": 64},
                     parallel={"dp": 2})  # fmt: skip
    slow = _manifest(
        _power(with_telemetry(_stretch(base, 1.5)), 1.2),
        workload={"model": "tiny", "global_batch": 16, "seq_len": 64},
        parallel={"dp": 2},
    )
    bare = base
    out = []
    for name, run in (("fast", fast), ("slow", slow), ("bare", bare)):
        write_run(run, d / name)
        out.append(d / name)
    return out


def _analyze_json(path: Path) -> dict[str, Any]:
    r = _cli("analyze", str(path), "--per-step", "--format", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _expected(doc: dict[str, Any]) -> dict[str, Any]:
    """The compare figures, computed here from analyze's JSON frames (docs/analyses.md, compare)."""
    ov = pl.DataFrame(doc["frames"]["overlap"])
    # steps cut by the trace's end (flagged ``cut`` on any rank) are in no step mean (issue 27)
    cut = ov.filter(pl.col("cut").fill_null(False))["step"].unique().implode()
    steps = ov.filter(pl.col("step").is_not_null() & ~pl.col("step").is_in(cut))
    per_step = steps.group_by("step").agg(pl.col("span_ns").max(), pl.col("exposed_comm_ns").mean())
    whole = ov.filter(pl.col("step").is_null())
    out: dict[str, Any] = {
        "step_time_ms": per_step["span_ns"].mean() / 1e6,
        "exposed_comm_ms": per_step["exposed_comm_ns"].mean() / 1e6,
        "overlap_pct": 100 * whole["overlap_ns"].sum() / whole["comm_ns"].sum(),
    }
    out["steps_per_s"] = 1e3 / out["step_time_ms"]
    bw = pl.DataFrame(doc["frames"]["collectives"]).filter(pl.col("busbw_gbps").is_not_null())

    def weighted(x: pl.DataFrame) -> float | None:  # Σ bytes × factor / Σ duration
        return (x["bytes"] * x["bus_factor"]).sum() / x["dur_ns"].sum() if x.height else None

    out["busbw_gbps"] = weighted(bw)
    for b in bw["size_bucket"].unique().to_list():
        out[f"busbw_{b}_gbps"] = weighted(bw.filter(pl.col("size_bucket") == b))
    out["busbw_dp_gbps"] = weighted(bw.filter(pl.col("dim") == "dp"))
    # the columns per dimension: the analyze JSON's dims frame (whole trace, summed over ranks)
    dims = {r["dim"]: r for r in doc["frames"]["dims"]}
    for d in ("tp", "cp", "dp", "pp", "ep"):
        r = dims.get(d, {})
        out[f"exposed_{d}_ms"] = r["exposed_comm_ns"] / 1e6 if r.get("exposed_comm_ns") is not None else None
        out[f"overlap_{d}_pct"] = r.get("overlap_pct")
        out[f"wait_{d}_pct"] = r.get("wait_pct")
        out[f"xfer_busbw_{d}_gbps"] = r.get("transfer_busbw_gbps")
    out["bubble_pp_pct"] = dims.get("pp", {}).get("bubble_pct")
    if doc["frames"].get("power"):
        pw = pl.DataFrame(doc["frames"]["power"])
        w = pw.filter(pl.col("step").is_null())
        out["avg_power_w"] = w["avg_w"].mean()
        out["peak_power_w"] = w["peak_w"].max()
        out["throttled_pct"] = 100 * w["throttled_ns"].sum() / (w["end_ns"] - w["start_ns"]).sum()
        s = pw.filter(pl.col("step").is_not_null() & ~pl.col("step").is_in(cut))
        e = s.group_by("step").agg((pl.col("avg_w") * (pl.col("end_ns") - pl.col("start_ns")) / 1e9).sum())
        out["energy_per_step_j"] = e["avg_w"].mean()
    else:
        for k in ("avg_power_w", "peak_power_w", "throttled_pct", "energy_per_step_j"):
            out[k] = None
    fl = [r for r in doc["frames"].get("flops", []) if r["step"] is None and r["op_class"] == "all"]
    fl = [r for r in fl if r["flop"] is not None and r["kernel_ns"]]
    out["tflops"] = sum(r["flop"] for r in fl) / sum(r["kernel_ns"] for r in fl) / 1e3 if fl else None
    return out


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_table_values_equal_each_runs_analyze_json(runs: list[Path]) -> None:
    r = _cli("compare", *map(str, runs), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    rows = {row["run"]: row for row in doc["rows"]}
    assert list(rows) == ["fast", "slow", "bare"]
    for p in runs:
        doc_p = _analyze_json(p)
        want = _expected(doc_p)
        got = rows[p.name]
        (cfg,) = doc_p["frames"]["config"]  # the configuration columns are analyze's config frame
        assert {k: got[k] for k in cfg} == cfg
        for k, v in want.items():
            assert _close(got[k], v), (p.name, k, got[k], v)
        # the gloo run's step 3 ends where its recording does: cut, so one whole step
        assert got["n_steps"] == 1 and got["world_size"] == 2 and got["nodes"] == 1
    fast, slow, bare = rows["fast"], rows["slow"], rows["bare"]
    # the configuration: manifest workload and layout
    assert (fast["model"], fast["global_batch"], fast["seq_len"], fast["tokens_per_step"], fast["dp"]) == (
        "tiny",
        8,
        64,
        512,
        2,
    )
    assert slow["tokens_per_step"] == 1024 and bare["tokens_per_step"] is None and bare["dp"] is None
    assert _close(fast["tokens_per_s"], 512 * fast["steps_per_s"]) and bare["tokens_per_s"] is None
    assert _close(fast["energy_per_token_j"], fast["energy_per_step_j"] / 512)
    # the variants differ as they were built: 1.5x the times, 1.2x the power
    assert math.isclose(slow["step_time_ms"] / fast["step_time_ms"], 1.5, rel_tol=1e-6)
    assert math.isclose(fast["busbw_dp_gbps"] / slow["busbw_dp_gbps"], 1.5, rel_tol=1e-6)
    assert bare["busbw_dp_gbps"] is None  # no layout: its group has no dimension
    assert fast["exposed_dp_ms"] > 0 and fast["wait_dp_pct"] is not None and bare["exposed_dp_ms"] is None
    assert math.isclose(slow["exposed_dp_ms"] / fast["exposed_dp_ms"], 1.5, rel_tol=1e-6)
    assert math.isclose(fast["overlap_dp_pct"], slow["overlap_dp_pct"], rel_tol=1e-3)  # times rounded to ns
    assert slow["avg_power_w"] > fast["avg_power_w"] > 0 and bare["avg_power_w"] is None
    assert (
        fast["tflops"] is not None and fast["tflops"] > 0
    )  # the ops' FLOP/s (CPU mode: their own durations)
    # best per column, in its direction (ties all marked)
    best = doc["best"]
    assert set(best["step_time_ms"]) == {"fast", "bare"} and best["avg_power_w"] == ["fast"]
    assert best["busbw_dp_gbps"] == ["fast"]
    assert best["tokens_per_s"] == ["slow"]  # 1024 tokens in 1.5x the time beats 512
    from tests.helpers.schema import schema_valid

    schema_valid(
        json.loads((Path(__file__).parents[2] / "docs" / "schema" / "compare.schema.json").read_text()), doc
    )
    assert doc["schema"] == "charllm-trace/compare" and doc["version"] == 1
    assert [c["name"] for c in doc["columns"]] == list(doc["rows"][0])
    dirs = {c["name"]: c["better"] for c in doc["columns"]}
    assert dirs["step_time_ms"] == "lower" and dirs["overlap_pct"] == "higher" and dirs["model"] is None


def test_sort_best_first_and_nulls_last(runs: list[Path]) -> None:
    def order(col: str) -> list[str]:
        r = _cli("compare", *map(str, runs), "--json", "--sort", col)
        assert r.exit_code == 0, r.output
        return [row["run"] for row in json.loads(r.output)["rows"]]

    assert order("step_time_ms")[-1] == "slow"  # lower is better: the slow run last
    assert order("avg_power_w") == ["fast", "slow", "bare"]  # bare has no power: last
    assert order("busbw_gbps")[0] in ("fast", "bare") and order("busbw_gbps")[-1] == "slow"
    assert order("global_batch") == ["fast", "slow", "bare"]  # configuration: ascending
    r = _cli("compare", *map(str, runs), "--sort", "nope")
    assert r.exit_code == 2 and "--sort 'nope': no such column" in r.output


def test_terminal_table_fits_80_columns_and_marks_best(runs: list[Path]) -> None:
    r = _cli("compare", *map(str, runs))
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(x) for x in lines if not x.startswith(("no value", "note", "*"))) <= 80
    assert sum(x.startswith("Runs compared") for x in lines) >= 3  # split into column groups
    assert " - " in r.output  # unknown values (the bare run's power)
    fast_lines = [x for x in lines if x.strip().startswith("fast")]
    assert any("*" in x for x in fast_lines)
    w = _cli("compare", *map(str, runs), "--wide")
    assert w.exit_code == 0
    assert sum(x.startswith("Runs compared") for x in w.output.splitlines()) == 1
    assert max(len(x) for x in w.output.splitlines()) > 80


def test_labels_in_run_order_and_by_number(runs: list[Path]) -> None:
    a = [str(p) for p in runs]
    r = _cli("compare", *a, "--json", "--label", "mbs=1", "--label", "mbs=2", "--label", "mbs=4",
             "--label", "3:run=baseline", "--label", "zone=x", "--label", "zone=y", "--label", "3:zone=z",
             "--label", "lr=0.1", "--label", "2:lr=0.2", "--label", "3:gbs=2", "--label", "3:seq=64")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    rows = doc["rows"]
    assert [x["run"] for x in rows] == ["fast", "slow", "baseline"]
    assert [x["micro_batch"] for x in rows] == [1, 2, 4]
    assert [x["zone"] for x in rows] == ["x", "y", "z"]
    assert [x["lr"] for x in rows] == [0.1, 0.2, None]  # numbers: every value is one
    assert rows[2]["tokens_per_step"] == 128 and _close(rows[2]["tokens_per_s"], 128 * rows[2]["steps_per_s"])
    cols = [c["name"] for c in doc["columns"]]
    assert cols.index("zone") < cols.index("step_time_ms")
    # a layout label names the groups by dimension, as analyze --parallel
    r = _cli("compare", a[2], a[2], "--json", "--label", "2:dp=2")
    rows = json.loads(r.output)["rows"]
    assert (
        "fast: tokens per step = global batch × sequence length"
        in json.loads(_cli("compare", *a, "--json").output)["notes"]
    )
    assert rows[0]["busbw_dp_gbps"] is None and rows[1]["busbw_dp_gbps"] is not None and rows[1]["dp"] == 2
    for bad, why in (
        (["--label", "4:tp=2"], "there is no run 4"),
        (["--label", "nokey"], "expected KEY=VALUE"),
        (["--label", "x=1"] * 4, "more x= labels than runs"),
        (["--label", "1:x=1", "--label", "x=2"], "run 1 already has a x label"),
        (["--label", "gbs=many"], "global_batch is a whole number"),
        (["--label", "step_time_ms=1"], "is a measured column"),
        (["--label", "tp=two"], "whole numbers"),
    ):
        r = _cli("compare", *a, *bad)
        assert r.exit_code == 2 and why in r.output, (bad, r.output)


def test_machine_formats_are_readable(runs: list[Path], tmp_path: Path) -> None:
    a = [str(p) for p in runs]
    j = json.loads(_cli("compare", *a, "--json").output)
    for fmt in ("csv", "parquet", "json"):
        out = tmp_path / f"sweep.{fmt}"
        r = _cli("compare", *a, "--format", fmt, "-o", str(out))
        assert r.exit_code == 0, r.output
        if fmt == "json":
            assert json.loads(out.read_text()) == j
            continue
        df = pl.read_csv(out) if fmt == "csv" else pl.read_parquet(out)
        assert df["run"].to_list() == ["fast", "slow", "bare"]
        for k in ("step_time_ms", "avg_power_w", "busbw_gbps", "tokens_per_step"):
            assert all(
                _close(x, y) for x, y in zip(df[k].to_list(), [row[k] for row in j["rows"]], strict=True)
            ), k
    assert _cli("compare", *a, "--format", "csv", "-o", str(tmp_path / "sweep.csv")).exit_code == 2  # exists
    csv = _cli("compare", *a, "--format", "csv")
    assert csv.exit_code == 0 and csv.output.startswith("run,model,")
    assert _cli("compare", *a, "--format", "parquet").exit_code == 2  # needs -o


def test_html_page_scatter_with_tooltips(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    r = _cli("compare", *map(str, runs), "--format", "html", "-o", str(out))
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert 'data-chart="scatter"' in page and "Throughput vs average power" in page
    # one point per run with power (bare has none), each with its figures as a tooltip
    assert page.count('<g class="points"') == 2
    assert "<title>fast: " in page and " tokens/s at " in page and "W average" in page
    assert "Bus bandwidth per parallelism dimension" in page and 'data-chart="bar"' in page
    assert "<script" not in page


def test_saved_results_and_cache(runs: list[Path], tmp_path: Path, cache_dir: Path) -> None:
    z = tmp_path / "fast.zip"
    assert _cli("analyze", str(runs[0]), "--per-step", "--save", str(z)).exit_code == 0
    a = json.loads(_cli("compare", str(runs[0]), str(runs[1]), "--json").output)["rows"]
    b = json.loads(_cli("compare", str(z), str(runs[1]), "--json").output)["rows"]
    assert b[0]["run"] == "fast.zip"
    for k in ("step_time_ms", "avg_power_w", "tokens_per_step", "busbw_dp_gbps", "model"):
        assert _close(a[0][k], b[0][k]) if not isinstance(a[0][k], str) else a[0][k] == b[0][k]
    # a second compare reads the cached results of both runs
    from charllm_trace import service
    from charllm_trace.analysis.results import AnalyzeOptions

    for p in runs[:2]:
        assert service.analyze(p, AnalyzeOptions(per_step=True)).hit


def test_bad_inputs_exit_2_naming_the_file(runs: list[Path], tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"traceEvents": [')
    r = _cli("compare", str(runs[0]), str(bad))
    assert r.exit_code == 2 and "broken.json" in r.output and "Traceback" not in r.output
    r = _cli("compare", str(runs[0]), str(tmp_path / "missing"))
    assert r.exit_code == 2 and "missing" in r.output
    r = _cli("compare", str(runs[0]))
    assert r.exit_code == 2 and "at least two runs" in r.output
    r = _cli("compare", str(runs[0]), str(runs[1]), "--format", "html")
    assert r.exit_code == 2 and "needs -o" in r.output


def test_run_config_from_manifest_workload_and_layout() -> None:
    from charllm_trace.analysis.runconfig import run_config
    from charllm_trace.collectors.launcher import parse_workload
    from tests.helpers.analysis_helpers import cpu, make_trace

    t = make_trace([cpu(1, "ProfilerStep#1", 0, 10)], world_size=4, hostname="h0", device_model="NVIDIA H100")
    wl = parse_workload("model=llama-7b,mbs=1,gbs=256,seq=4096")
    assert wl == {"model": "llama-7b", "micro_batch": 1, "global_batch": 256, "seq_len": 4096}
    man = {"workload": wl, "parallel": {"tp": 2, "dp": 1}, "world_size": 4, "nodes": 2,
           "rank_devices": {"0": {"uuid": "a"}, "1": {"uuid": "b"}}}  # fmt: skip
    cfg = run_config(Run(traces={0: t}, manifest=man))
    row = cfg.table.row(0, named=True)
    assert row["tokens_per_step"] == 256 * 4096 and row["model"] == "llama-7b" and row["micro_batch"] == 1
    assert (row["tp"], row["dp"], row["pp"], row["world_size"], row["nodes"], row["gpus"]) == (
        2,
        1,
        None,
        4,
        2,
        2,
    )
    assert row["device"] == "NVIDIA H100"
    assert any("global batch × sequence length" in n for n in cfg.notes)
    # the layout the analysis used wins over the manifest's; a single rank of four: nodes/gpus unknown
    assert run_config(Run(traces={0: t}, manifest={}), {"tp": 3, "pp": 1}).notes == [
        "tp × pp = 3 does not divide the world size 4"
    ]
    row = run_config(Run(traces={0: t}, manifest={}), {"tp": 4}).table.row(0, named=True)
    assert (row["tp"], row["world_size"], row["nodes"], row["gpus"], row["tokens_per_step"]) == (
        4,
        4,
        None,
        None,
        None,
    )


def test_compare_rows_are_cached_and_never_trusted(runs: list[Path], cache_dir: Path, monkeypatch) -> None:
    from charllm_trace import service
    from charllm_trace.analysis.results import AnalyzeOptions

    opts = AnalyzeOptions(per_step=True)

    def summary_row() -> dict[str, Any]:
        got = service.analyze(runs[0], opts, service.Request(row=True))
        assert got.row is not None
        return got.row

    first = summary_row()

    def fail(*a: Any, **k: Any) -> Any:
        raise AssertionError("analysed again")

    with monkeypatch.context() as m:
        m.setattr(service, "_load_and_analyze", fail)
        m.setattr(service.results_cache, "lookup", fail)
        assert summary_row() == first  # the cached row: neither analysed nor the results entry read
    from charllm_trace.core import cas

    (entry,) = (cache_dir / "compare").iterdir()
    cas.write(cas.COMPARE, entry.name, b'{"step_time_ms": [1, 2]}')  # the store's, checksum right, not a row
    monkeypatch.setattr(service, "_load_and_analyze", fail)
    assert summary_row() == first  # a bad entry: deleted, computed again from the results entry
    assert json.loads(cas.read(cas.COMPARE, entry.name) or b"") == first
    entry.write_bytes(entry.read_bytes().replace(b"{", b"[", 1))  # a flipped byte: checksum mismatch
    assert summary_row() == first
    assert json.loads(cas.read(cas.COMPARE, entry.name) or b"") == first
    entry.write_text('{"step_time_ms": [1, 2]}')  # no marker: someone else's file, left alone
    assert summary_row() == first
    assert entry.read_text() == '{"step_time_ms": [1, 2]}'
    entry.unlink()
    assert summary_row() == first
    info = _cli("cache", "info", "--json")
    assert info.exit_code == 0 and json.loads(info.output)["kinds"]["compare"]["entries"] == 1


def test_results_saved_before_the_config_field_still_load(runs: list[Path], tmp_path: Path) -> None:
    """A results file of version 1 written before ``RunAnalysis.config`` existed reads it as None."""
    import io
    import zipfile

    from charllm_trace.store.results import MANIFEST, load_results

    z = tmp_path / "new.zip"
    assert _cli("analyze", str(runs[2]), "--per-step", "--save", str(z)).exit_code == 0
    old = tmp_path / "old.zip"
    buf = io.BytesIO()
    with zipfile.ZipFile(z) as src, zipfile.ZipFile(buf, "w") as dst:
        body = json.loads(src.read(MANIFEST))
        assert body["analysis"].pop("config") is not None
        gone = [m for m in body["members"] if m.startswith("frames/config.")]
        for m in gone:
            del body["members"][m]
        dst.writestr(MANIFEST, json.dumps(body))
        for m in body["members"]:
            dst.writestr(m, src.read(m))
    old.write_bytes(buf.getvalue())
    res = load_results(old)
    assert res.config is None and res.overlap is not None
    r = _cli("compare", str(old), str(z), "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["rows"]
    assert rows[0]["world_size"] is None and rows[1]["world_size"] == 2
    assert rows[0]["step_time_ms"] == rows[1]["step_time_ms"]


def test_html_page_in_a_browser(runs: list[Path], tmp_path: Path, browser) -> None:
    """The page in headless Chromium: no errors, nothing fetched, one drawn point per run with power."""

    out = tmp_path / "page.html"
    assert _cli("compare", *map(str, runs), "--format", "html", "-o", str(out)).exit_code == 0
    res = browser(out, tmp_path / "page.png")
    assert res.console_errors == [] and res.page_errors == []
    assert all(u.startswith("file:") for u in res.requests)
    figs = {f["kind"]: f for f in res.figures}
    assert figs["scatter"]["drawn"] == 2  # fast and slow; bare has no power
    assert figs["bar"]["drawn"] >= 3 and res.distinct_colors > 10


def test_real_gpu_profiles_match_their_analyze_json() -> None:
    """GPU traces: the A100 DDP profile (NCCL kernels; dp=2 by label) and the 2-rank filter set."""
    from tests.conftest import shared_trace

    a100 = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    two = shared_trace("hta/trace_filter_2ranks")
    r = _cli("compare", str(a100), str(two), "--json", "--label", "1:dp=2")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["rows"]
    want = _expected(
        json.loads(_cli("analyze", str(a100), "--per-step", "--parallel", "dp=2", "--json").output)
    )
    for k, v in want.items():
        assert _close(rows[0][k], v), (k, rows[0][k], v)
    assert rows[0]["n_steps"] == 3 and rows[0]["device"].startswith("NVIDIA A100")
    assert rows[0]["busbw_dp_gbps"] is not None and _close(rows[0]["busbw_dp_gbps"], rows[0]["busbw_gbps"])
    want = _expected(_analyze_json(two))
    for k, v in want.items():
        assert _close(rows[1][k], v), (k, rows[1][k], v)
    # two ranks of a 128-rank job (the profiles' distributedInfo): nodes and GPUs are not counted
    assert (rows[1]["world_size"], rows[1]["nodes"], rows[1]["gpus"]) == (128, None, None)


def test_no_cache_writes_nothing(runs: list[Path], cache_dir: Path) -> None:
    r = _cli("compare", str(runs[0]), str(runs[2]), "--no-cache", "--json")
    assert r.exit_code == 0, r.output
    assert not cache_dir.exists()
    r2 = _cli("compare", str(runs[0]), str(runs[2]), "--json")
    assert json.loads(r2.output) == json.loads(r.output)
    assert len(list((cache_dir / "compare").iterdir())) == 2 and (cache_dir / "results").is_dir()


def test_tflops_from_a_flops_result_when_there_is_one() -> None:
    """TFLOP/s is read from a FLOP/s result's whole-trace "all" rows (Σ FLOP / Σ kernel time over
    ranks) when the analysis carries one, and is null otherwise."""
    from types import SimpleNamespace

    from charllm_trace.analysis.results import RunAnalysis
    from charllm_trace.regress.sweep import achieved_tflops

    an = RunAnalysis(overlap=None, bandwidth=None, energy=None, power=None)
    assert achieved_tflops(an) is None
    per_step = pl.DataFrame(
        {
            "rank": [0, 0, 1, 0],
            "step": [None, None, None, 3],
            "op_class": ["all", "gemm", "all", "all"],
            "flop": [4 * 10**12, 3 * 10**12, 2 * 10**12, 10**12],
            "kernel_ns": [20_000_000, 15_000_000, 40_000_000, 5_000_000],
        }
    )
    an.flops = SimpleNamespace(per_step=per_step)  # the FLOP/s result of issue 13 item 3
    # (4e12 + 2e12) FLOP in 60 ms of kernels = 100 TFLOP/s
    assert achieved_tflops(an) == pytest.approx(100.0, rel=1e-12)
    an.flops = SimpleNamespace(per_step=per_step.filter(pl.col("op_class") == "gemm"))
    assert achieved_tflops(an) is None
