"""`charllm-trace analyze` end to end: every shared trace, formats, errors, --simulate."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from tests.conftest import SHARED_TRACES, shared_trace

A100 = "hta/a100_ddp_nccl_rank0.json.gz"


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _shared_inputs() -> list[str]:
    """Every trace file under ../shared/traces, and every directory of per-rank files."""
    if not SHARED_TRACES.is_dir():
        return []
    out = []
    for p in sorted(SHARED_TRACES.rglob("*")):
        if p.is_file() and p.name.endswith((".json.gz", ".json", ".et")):
            out.append(str(p.relative_to(SHARED_TRACES)))
        elif p.is_dir():
            files = [c.name for c in p.iterdir() if c.is_file()]
            if files and all("rank" in f for f in files):  # a directory of per-rank files = a run
                out.append(str(p.relative_to(SHARED_TRACES)))
    return out


SHARED_INPUTS = _shared_inputs()


@pytest.mark.parametrize("rel", SHARED_INPUTS or ["(none)"])
def test_analyze_every_shared_trace(rel):
    """No crash on any real trace (HTA 0.5.0 crashes on the TraceLens H100 profile); each
    analysis is printed or its absence explained in one line."""
    if rel == "(none)":
        pytest.skip("../shared/traces is absent")
    path = shared_trace(rel)
    r = _invoke("analyze", str(path), "--per-step")
    assert r.exit_code == 0, r.output
    for name in ("overlap", "bandwidth", "energy", "power"):
        shown = {
            "overlap": "Compute / communication overlap",
            "bandwidth": "Collective bandwidth",
            "energy": "Energy (",
            "power": "Power and thermal",
        }[name]
        assert (
            shown in r.output
            or f"{name}: " in r.output
            or (name == "power" and "energy and power not computed" in r.output)
        ), (name, r.output)


def test_analyze_json_has_all_frames(tmp_path):
    path = shared_trace(A100)
    out = tmp_path / "a.json"
    r = _invoke("analyze", str(path), "--format", "json", "-o", str(out), "--hta-compat")
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["options"]["hta_compat"] is True
    assert abs(doc["frames"]["overlap"][0]["overlap_pct"] - 14.31) <= 0.5
    assert len(doc["frames"]["collectives"]) == 21
    assert doc["skipped"]["energy"].startswith("no telemetry")
    # refuses to overwrite without --force
    r = _invoke("analyze", str(path), "--format", "json", "-o", str(out))
    assert r.exit_code == 2 and "already exists" in r.output
    assert _invoke("analyze", str(path), "--format", "json", "-o", str(out), "--force").exit_code == 0


def test_analyze_csv_and_parquet_one_file_per_frame(tmp_path):
    path = shared_trace(A100)
    r = _invoke("analyze", str(path), "--format", "parquet", "-o", str(tmp_path / "x.parquet"))
    assert r.exit_code == 0, r.output
    coll = pl.read_parquet(tmp_path / "x.collectives.parquet")
    assert coll.height == 21 and "busbw_gbps" in coll.columns
    r = _invoke("analyze", str(path), "--format", "csv", "-o", str(tmp_path / "x.csv"))
    assert r.exit_code == 0
    assert pl.read_csv(tmp_path / "x.overlap.csv").height == 1
    r = _invoke("analyze", str(path), "--format", "csv")
    assert r.exit_code == 0 and "# overlap" in r.output and "# collectives" in r.output


def test_analyze_no_timestamps_and_simulate():
    path = shared_trace("chakra/feeder_tests_chakra.0.et")
    r = _invoke("analyze", str(path))
    assert r.exit_code == 0
    assert "overlap: this trace has no timestamps" in r.output and "--simulate" in r.output
    r = _invoke("analyze", str(path), "--simulate", "--format", "json")
    doc = json.loads(r.output)
    assert doc["simulated"] is True and doc["frames"]["overlap"][0]["comm_ns"] > 0
    r = _invoke("analyze", str(path), "--simulate")
    assert "SIMULATED" in r.output and "[SIMULATED]" in r.output


def test_analyze_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = _invoke("analyze", str(bad))
    assert r.exit_code == 2 and r.output.startswith("error: ")
    r = _invoke("analyze", str(tmp_path / "missing.et"))
    assert r.exit_code == 2 and "no such file" in r.output
    path = shared_trace(A100)
    r = _invoke("analyze", str(path), "--parallel", "tp=x")
    assert r.exit_code == 2 and "--parallel" in r.output
    r = _invoke("analyze", str(path), "--ranks", "5")
    assert r.exit_code == 2 and "no rank" in r.output


def test_analyze_parallel_names_dimension_and_peak_override():
    path = shared_trace(A100)
    r = _invoke("analyze", str(path), "--parallel", "dp=2", "--peak-gbps", "100", "--format", "json")
    doc = json.loads(r.output)
    assert {row["dim"] for row in doc["frames"]["overlap_by_group"]} == {"dp"}
    assert {row["peak_gbps"] for row in doc["frames"]["collectives"]} == {100.0}


def test_analyze_own_gloo_fixture_cpu_mode():
    """Our own fixture (a real 2-rank gloo run, CPU only): CPU mode; one collective per c10d
    op in each rank's Kineto file (counted here from the JSON), matched across both ranks."""
    import gzip

    from tests.conftest import FIXTURES

    d = FIXTURES / "cpu-2rank-gloo"
    r = _invoke("analyze", str(d), "--format", "json", "--per-step")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    coll = pl.DataFrame(doc["frames"]["collectives"])
    for rank in (0, 1):
        ev = json.loads(gzip.open(d / f"rank-{rank}.kineto.json.gz").read())["traceEvents"]
        n_c10d = sum(1 for e in ev if e.get("cat") == "cpu_op" and e.get("name", "").startswith("c10d::"))
        assert coll.filter(pl.col("rank") == rank).height == n_c10d
    assert len(doc["frames"]["collectives_matched"]) == n_c10d
    assert {m["n_ranks"] for m in doc["frames"]["collectives_matched"]} == {2}
    ov = [row for row in doc["frames"]["overlap"] if row["step"] is None]
    assert len(ov) == 2 and all(row["comm_ns"] > 0 and row["compute_ns"] > 0 for row in ov)
    assert any("CPU mode" in n for n in doc["notes"]["overlap"])


def test_analyze_run_dir_with_telemetry_prints_all_four(tmp_path):
    """A run directory in the collector's layout: the real A100 Kineto profile as rank 0 and a
    SYNTHETIC telemetry stream (10 ms samples, power ramping 200 -> 400 W, energy counter,
    a power-cap throttle period) read through the telemetry reader. All four analyses print."""
    import shutil

    from charllm_trace.collectors.telemetry.format import CSV_COLUMNS

    src = shared_trace(A100)
    shutil.copy(src, tmp_path / "rank-0.kineto.json.gz")  # a temporary copy, outside the project
    doc = json.loads(__import__("gzip").open(src).read())
    base = doc["baseTimeNanoseconds"]
    ts = [base + round(e["ts"] * 1000) for e in doc["traceEvents"] if e.get("ph") == "X"]
    t0, t1 = min(ts) - 10_000_000, max(ts) + 10_000_000
    rows = []
    n = (t1 - t0) // 10_000_000 + 1
    energy = 5000.0
    for i in range(n):
        t = t0 + i * 10_000_000
        p = 200.0 + 200.0 * i / n
        if i:
            energy += p * 0.01
        thr = 0x4 if n // 2 <= i < n // 2 + 5 else 0
        rows.append(f"{t},0,{p},{energy},{50 + i / 100},,1410,,90,380,{thr}")
    (tmp_path / "telemetry-h.csv").write_text(",".join(CSV_COLUMNS) + "\n" + "\n".join(rows) + "\n")
    (tmp_path / "telemetry-h.meta.json").write_text(
        json.dumps(
            {
                "host": "h",
                "file": "telemetry-h.csv",
                "devices": [{"index": 0}],
                "format": "charllm-telemetry-csv",
                "format_version": 1,
                "clock": "unix_ns",
            }
        )  # fmt: skip
    )
    (tmp_path / "rank-0.info.json").write_text(
        json.dumps({"rank": 0, "hostname": "h", "device": {"index": 0}, "info_version": 1})
    )
    r = _invoke("analyze", str(tmp_path), "--per-step")
    assert r.exit_code == 0, r.output
    for title in ("Compute / communication overlap", "Collective bandwidth", "Energy (", "Power and thermal",
                  "Time per throttle reason", "sw_power_cap"):  # fmt: skip
        assert title in r.output, title
    r = _invoke("analyze", str(tmp_path), "--format", "json")
    d = json.loads(r.output)
    tot = d["frames"]["energy_totals"][0]
    assert tot["counter_j"] == pytest.approx(energy - 5000.0, rel=1e-6)
    assert tot["operators_j"] + tot["idle_j"] == pytest.approx(tot["total_j"], rel=1e-9)
    assert abs(d["frames"]["overlap"][0]["overlap_pct"] - 15.61) < 0.01  # whole trace, exact ns


def test_a_note_shared_by_every_rank_is_printed_once(tmp_path, monkeypatch) -> None:
    """The 8-rank DLRM set printed the same note 8 times (issue 14: notes de-duplicated)."""
    from click.testing import CliRunner

    from charllm_trace.cli.app import main
    from tests.conftest import shared_trace

    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(tmp_path / "cache"))
    r = CliRunner().invoke(main, ["analyze", "--wide", str(shared_trace("param/dlrm_8ranks_v100"))])
    assert r.exit_code == 0, r.output
    notes = [ln.strip() for ln in r.output.splitlines() if "carry no process group" in ln]
    assert notes == [
        "note: ranks 0-7: communication kernels carry no process group: per-group overlap not computed"
    ]


def test_json_flag_on_every_command_with_a_json_format(tmp_path, monkeypatch) -> None:
    """Issue 14: `info --json` existed, `analyze --json` did not. --json equals --format json."""
    import json

    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    monkeypatch.setenv("CHARLLM_TRACE_CACHE_DIR", str(tmp_path / "cache"))
    from pathlib import Path

    run = Path(__file__).parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"
    base = run.parent / "cpu-2rank-gloo.baseline.json"
    for args in (
        ["analyze", str(run)],
        ["check", str(run), "--baseline", str(base)],
        ["diff", str(run), str(run)],
        ["compare", str(run), str(run)],
    ):
        a = CliRunner().invoke(main, [*args, "--json"])
        b = CliRunner().invoke(main, [*args, "--format", "json"])
        assert a.exit_code == b.exit_code == 0, (args, a.output, b.output)
        assert json.loads(a.stdout) == json.loads(b.stdout)
    r = CliRunner().invoke(main, ["analyze", str(run), "--json", "--format", "csv"])
    assert r.exit_code == 2 and r.stderr.startswith("error: --json and --format csv")
