"""baseline / check: the file format, tolerances, the comparison engine, and the CLI on real traces."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import orjson
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from regen_baselines import baseline_path, fixture_traces

from charllm_trace.core.errors import InputError, UsageError
from charllm_trace.core.model import Run
from charllm_trace.regress.baseline import (
    FORMAT_VERSION,
    HIGHER,
    LOWER,
    METRIC_CLASSES,
    Metric,
    make_baseline,
    read_baseline,
    write_baseline,
)
from charllm_trace.regress.compare import compare
from charllm_trace.regress.tolerance import (
    DEFAULT_TOLERANCES,
    Tolerance,
    format_tolerances,
    parse_tolerances,
)
from tests.conftest import shared_trace

# ---------------------------------------------------------------------------
# Tolerance parser
# ---------------------------------------------------------------------------


def test_defaults_cover_every_class() -> None:
    assert set(parse_tolerances(None)) == set(METRIC_CLASSES)
    assert parse_tolerances("") == DEFAULT_TOLERANCES


def test_parse_issue_example() -> None:
    t = parse_tolerances("overlap=2pp,busbw=5%,energy=5%")
    assert t["overlap"] == Tolerance(absolute=2.0)
    assert t["busbw"] == Tolerance(relative=0.05)
    assert t["energy"] == Tolerance(relative=0.05)
    # the classes not named keep their defaults
    assert t["power"] == DEFAULT_TOLERANCES["power"]
    assert t["throttle"] == DEFAULT_TOLERANCES["throttle"]


def test_parse_units_convert_to_class_unit() -> None:
    t = parse_tolerances("exposed_comm=500us,throttle=10%+0.2s,energy=1.5kJ,power=20W,busbw=3GB/s")
    assert t["exposed_comm"] == Tolerance(absolute=0.5)  # ms
    assert t["throttle"] == Tolerance(relative=0.10, absolute=200.0)
    assert t["energy"] == Tolerance(absolute=1500.0)
    assert t["power"] == Tolerance(absolute=20.0)
    assert t["busbw"] == Tolerance(absolute=3.0)


def test_format_round_trips() -> None:
    t = parse_tolerances("overlap=1.5pp+10%,throttle=50ms")
    assert parse_tolerances(format_tolerances(t)) == t


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("overlap", "not CLASS=VALUE"),
        ("latency=5%", "unknown class 'latency'"),
        ("busbw=2pp", "does not fit busbw"),
        ("energy=5", "expected a number with a unit"),
        ("overlap=2pp,overlap=3pp", "given twice"),
        ("power=5%+6%", "two relative bounds"),
        ("power=-5%", "expected a number with a unit"),
    ],
)
def test_parse_rejects_bad_specs(spec: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_tolerances(spec)


def test_tolerance_allows() -> None:
    pp = Tolerance(absolute=2.0)
    assert pp.allows(50.0, 52.0) and pp.allows(50.0, 48.0)
    assert not pp.allows(50.0, 52.5)
    rel = Tolerance(relative=0.05)
    assert rel.allows(100.0, 105.0) and not rel.allows(100.0, 105.5)
    assert rel.allows(0.0, 0.0) and not rel.allows(0.0, 1e-9)  # relative of 0 is exact
    both = Tolerance(relative=0.05, absolute=100.0)
    assert both.allows(0.0, 99.0) and both.allows(10_000.0, 10_400.0)
    assert not both.allows(0.0, 101.0)


# ---------------------------------------------------------------------------
# Comparison engine
# ---------------------------------------------------------------------------


def _m(key: str, cls: str, value: float) -> Metric:
    return Metric.of(key, cls, value)


def test_compare_statuses() -> None:
    old = [
        _m("overlap_pct/rank=0/step=1", "overlap", 60.0),
        _m("overlap_pct/rank=0/step=2", "overlap", 60.0),
        _m("overlap_pct/rank=0/step=3", "overlap", 60.0),
        _m("energy_j/rank=0/phase=forward", "energy", 100.0),
        _m("energy_j/rank=0/phase=backward", "energy", 100.0),
        _m("busbw_median_gbps/coll=all_reduce/pg=0/size=1MB-4MB", "busbw", 40.0),
        _m("power_peak_w/rank=0/device=0", "power", 300.0),
    ]
    new = [
        _m("overlap_pct/rank=0/step=1", "overlap", 57.0),  # -3pp, higher is better -> regressed
        _m("overlap_pct/rank=0/step=2", "overlap", 61.9),  # +1.9pp -> within
        _m("overlap_pct/rank=0/step=3", "overlap", 63.0),  # +3pp -> improved
        _m("energy_j/rank=0/phase=forward", "energy", 106.0),  # +6%, lower is better -> regressed
        _m("energy_j/rank=0/phase=backward", "energy", 90.0),  # -10% -> improved
        _m("power_peak_w/rank=0/device=0", "power", 300.0),
        _m("throttle_ms/rank=0/device=0", "throttle", 0.0),  # new
    ]
    cmp = compare(old, new)
    status = {c.key: c.status for c in cmp.changes}
    assert status == {
        "overlap_pct/rank=0/step=1": "regressed",
        "overlap_pct/rank=0/step=2": "within",
        "overlap_pct/rank=0/step=3": "improved",
        "energy_j/rank=0/phase=forward": "regressed",
        "energy_j/rank=0/phase=backward": "improved",
        "busbw_median_gbps/coll=all_reduce/pg=0/size=1MB-4MB": "missing",
        "power_peak_w/rank=0/device=0": "within",
        "throttle_ms/rank=0/device=0": "new",
    }
    assert cmp.counts() == {"regressed": 2, "improved": 2, "within": 2, "missing": 1, "new": 1}
    assert not cmp.ok
    assert {c.key for c in cmp.failures} == {
        "overlap_pct/rank=0/step=1",
        "energy_j/rank=0/phase=forward",
        "busbw_median_gbps/coll=all_reduce/pg=0/size=1MB-4MB",
    }
    ch = next(c for c in cmp.changes if c.key == "energy_j/rank=0/phase=forward")
    assert ch.delta == pytest.approx(6.0) and ch.relative == pytest.approx(0.06)


def test_missing_can_be_allowed_and_tolerance_overrides() -> None:
    old = [
        _m("busbw_median_gbps/coll=all_reduce/pg=0/size=1MB-4MB", "busbw", 40.0),
        _m("x/energy", "energy", 1.0),
    ]
    new = [_m("busbw_median_gbps/coll=all_reduce/pg=0/size=1MB-4MB", "busbw", 37.0)]  # -7.5%
    assert not compare(old, new, allow_missing=True).ok
    loose = parse_tolerances("busbw=8%")
    assert compare(old, new, loose, allow_missing=True).ok
    assert not compare(old, new, loose).ok  # the missing energy metric still fails


def test_compare_incompatible_metric_is_input_error() -> None:
    a = [Metric("k", "energy", "J", 1.0, LOWER)]
    b = [Metric("k", "busbw", "GB/s", 1.0, HIGHER)]
    with pytest.raises(InputError, match="regenerate the baseline"):
        compare(a, b, baseline_path="b.json")


@given(
    old=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    new=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    cls=st.sampled_from(sorted(METRIC_CLASSES)),
)
def test_compare_is_a_partition_and_respects_direction(old: float, new: float, cls: str) -> None:
    tol = DEFAULT_TOLERANCES[cls]

    def expected(a: float, b: float) -> str:
        if tol.allows(a, b):
            return "within"
        worse = b < a if METRIC_CLASSES[cls].direction == HIGHER else b > a
        return "regressed" if worse else "improved"

    ch = compare([_m("k", cls, old)], [_m("k", cls, new)]).changes[0]
    assert ch.status == expected(old, new)
    # Swapping the runs swaps regressed and improved whenever both directions fall outside the
    # tolerance. A relative tolerance is taken against the old value, so near its edge one
    # direction can be within and the other not: each is then judged by its own tolerance.
    back = compare([_m("k", cls, new)], [_m("k", cls, old)]).changes[0].status
    assert back == expected(new, old)
    if ch.status != "within" and back != "within":
        assert {ch.status, back} == {"regressed", "improved"}


# ---------------------------------------------------------------------------
# Baseline file
# ---------------------------------------------------------------------------


def test_baseline_file_round_trip(tmp_path: Path) -> None:
    ms = [_m("overlap_pct/rank=0/step=all", "overlap", 12.5), _m("energy_j/rank=0/total", "energy", 3.0)]
    b = make_baseline(ms, {"name": "x", "ranks": [0]})
    p = write_baseline(b, tmp_path / "b.json")
    doc = json.loads(p.read_text())
    assert doc["format"] == "charllm-trace-baseline" and doc["version"] == FORMAT_VERSION
    assert [m["key"] for m in doc["metrics"]] == sorted(m.key for m in ms)
    back = read_baseline(p)
    assert back.by_key() == {m.key: m for m in ms}
    assert back.input == {"name": "x", "ranks": [0]}
    with pytest.raises(InputError, match="already exists"):
        write_baseline(b, p)
    write_baseline(b, p, force=True)


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "b.json"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "file is empty"),
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "not a charllm-trace baseline"),
        ('{"format": "charllm-trace-baseline", "version": 99, "metrics": []}', "version 99 is not supported"),
        ('{"format": "charllm-trace-baseline", "version": 1}', 'no "metrics" list'),
        ('{"format": "charllm-trace-baseline", "version": 1, "metrics": [{"key": "k"}]}', "has no 'class'"),
        (
            '{"format": "charllm-trace-baseline", "version": 1, "metrics": [{"key": "k", "class": "energy",'
            ' "unit": "J", "value": "x", "direction": "lower-is-better"}]}',
            "value must be a number",
        ),
        (
            '{"format": "charllm-trace-baseline", "version": 1, "metrics": [{"key": "k", "class": "energy",'
            ' "unit": "W", "value": 1, "direction": "lower-is-better"}]}',
            "expected 'J'",
        ),
        (
            '{"format": "charllm-trace-baseline", "version": 1, "metrics": ['
            '{"key": "k", "class": "energy", "unit": "J", "value": 1, "direction": "lower-is-better"},'
            '{"key": "k", "class": "energy", "unit": "J", "value": 2, "direction": "lower-is-better"}]}',
            "duplicate metric key",
        ),
    ],
)
def test_read_baseline_rejects_bad_files(tmp_path: Path, text: str, fragment: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(InputError, match=fragment) as ei:
        read_baseline(p)
    assert "\n" not in ei.value.one_line()
    assert ei.value.path == str(p)


def test_read_baseline_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_baseline(tmp_path / "nope.json")


# ---------------------------------------------------------------------------
# Headline extraction from typed analysis results (synthetic results)
# ---------------------------------------------------------------------------


def _synthetic_analysis():  # noqa: ANN202

    from charllm_trace.analysis.results import (
        BANDWIDTH_SUMMARY_SCHEMA,
        COLLECTIVE_SCHEMA,
        ENERGY_SCHEMA,
        ENERGY_TOTAL_SCHEMA,
        MATCHED_SCHEMA,
        OVERLAP_GROUP_SCHEMA,
        OVERLAP_SCHEMA,
        POWER_SCHEMA,
        THROTTLE_SCHEMA,
        BandwidthResult,
        EnergyResult,
        OverlapResult,
        PowerResult,
        RunAnalysis,
        frame,
    )

    overlap = OverlapResult(
        per_rank=frame(
            {
                "rank": [0, 0, 0, 1, 1],
                "step": [None, 1, 2, None, 1],
                "comm_ns": [4_000_000, 2_000_000, 0, 3_000_000, 3_000_000],
                "overlap_ns": [1_000_000, 1_000_000, 0, 3_000_000, 3_000_000],
                "exposed_comm_ns": [3_000_000, 1_000_000, 0, 0, 0],
                "overlap_pct": [25.0, 50.0, None, 100.0, 100.0],
            },
            OVERLAP_SCHEMA,
        ),
        per_group=frame({}, OVERLAP_GROUP_SCHEMA),
        per_dim=frame({}, OVERLAP_GROUP_SCHEMA),
    )
    bw = BandwidthResult(
        collectives=frame(
            {
                "rank": [0, 0, 0, 1, 1],
                "coll_type": ["all_reduce"] * 3 + ["all_gather", "all_reduce"],
                "pg_name": ["0"] * 5,
                "size_bucket": ["1MB-4MB"] * 5,
                "busbw_gbps": [10.0, 30.0, 20.0, 7.0, 40.0],
            },
            COLLECTIVE_SCHEMA,
        ),
        summary=frame({}, BANDWIDTH_SUMMARY_SCHEMA),
        matched=frame({}, MATCHED_SCHEMA),
    )
    energy = EnergyResult(
        totals=frame({"rank": [0], "device": [0], "total_j": [500.0]}, ENERGY_TOTAL_SCHEMA),
        by=frame(
            {
                "rank": [0, 0, 0],
                "group": ["phase", "phase", "op"],
                "key": ["forward", "backward", "aten::mm"],
                "energy_j": [120.0, 240.0, 99.0],
            },
            ENERGY_SCHEMA,
        ),
    )
    power = PowerResult(
        per_step=frame(
            {
                "rank": [0, 0],
                "device": [0, 0],
                "step": [None, 1],
                "avg_w": [250.0, 260.0],
                "peak_w": [400.0, 390.0],
                "throttled_ns": [30_000_000, 10_000_000],
            },
            POWER_SCHEMA,
        ),
        throttle=frame({}, THROTTLE_SCHEMA),
    )
    return RunAnalysis(overlap=overlap, bandwidth=bw, energy=energy, power=power, ranks=[0, 1])


def test_headline_extracts_every_class() -> None:
    from charllm_trace.regress.headline import headline

    got = {m.key: (m.cls, m.value) for m in headline(_synthetic_analysis())}
    assert got == {
        # rows without communication (rank 0 step 2) give no overlap metric
        "overlap_pct/rank=0/step=all": ("overlap", 25.0),
        "overlap_pct/rank=0/step=1": ("overlap", 50.0),
        "overlap_pct/rank=1/step=all": ("overlap", 100.0),
        "overlap_pct/rank=1/step=1": ("overlap", 100.0),
        "exposed_comm_ms/rank=0/step=all": ("exposed_comm", 3.0),
        "exposed_comm_ms/rank=0/step=1": ("exposed_comm", 1.0),
        "exposed_comm_ms/rank=1/step=all": ("exposed_comm", 0.0),
        "exposed_comm_ms/rank=1/step=1": ("exposed_comm", 0.0),
        # median over instances of all ranks: all_reduce {10, 30, 20, 40} -> 25
        "busbw_median_gbps/coll=all_reduce/pg=0/size=1MB-4MB": ("busbw", 25.0),
        "busbw_median_gbps/coll=all_gather/pg=0/size=1MB-4MB": ("busbw", 7.0),
        "energy_j/rank=0/phase=forward": ("energy", 120.0),
        "energy_j/rank=0/phase=backward": ("energy", 240.0),
        "energy_j/rank=0/device=0/total": ("energy", 500.0),
        # whole-window row only
        "power_peak_w/rank=0/device=0": ("power", 400.0),
        "power_mean_w/rank=0/device=0": ("power", 250.0),
        "throttle_ms/rank=0/device=0": ("throttle", 30.0),
    }


def test_headline_of_skipped_analyses_is_empty() -> None:
    from charllm_trace.analysis.results import RunAnalysis
    from charllm_trace.regress.headline import headline

    an = RunAnalysis(
        overlap=None, bandwidth=None, energy=None, power=None, skipped={"energy": "no telemetry"}
    )
    assert headline(an) == []


# ---------------------------------------------------------------------------
# CLI: bad input exits 2 with one line
# ---------------------------------------------------------------------------


def _cli(*args: str):  # noqa: ANN202
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    return CliRunner().invoke(main, list(args))


def _valid_baseline(tmp_path: Path) -> Path:
    return write_baseline(make_baseline([_m("energy_j/rank=0/total", "energy", 1.0)]), tmp_path / "ok.json")


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "no such file"),
        ("{oops", "not valid JSON"),
        ('{"format": "charllm-trace-baseline", "version": 0, "metrics": []}', "version 0 is not supported"),
    ],
)
def test_check_bad_baseline_exits_2_with_one_line(tmp_path: Path, content: str | None, fragment: str) -> None:
    p = tmp_path / "b.json"
    if content is not None:
        p.write_text(content)
    r = _cli("check", str(_valid_baseline(tmp_path)), "--baseline", str(p))
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {p}: ") and fragment in lines[0]
    assert "Traceback" not in r.output


def test_check_unreadable_run_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-run"
    base = _valid_baseline(tmp_path)
    r = _cli("check", str(missing), "--baseline", str(base))
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [f"error: {missing}: no such file or directory"]


def test_check_corrupt_run_exits_2(tmp_path: Path) -> None:
    pytest.importorskip("charllm_trace.et.reader")
    base = _valid_baseline(tmp_path)
    garbage = tmp_path / "garbage.et"
    garbage.write_bytes(b"\x00\x01not an execution trace")
    r = _cli("check", str(garbage), "--baseline", str(base))
    assert r.exit_code == 2, r.output
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(f"error: {garbage}: ")


def test_check_bad_tolerance_exits_2(tmp_path: Path) -> None:
    r = _cli("check", str(tmp_path), "--baseline", str(_valid_baseline(tmp_path)), "--tolerance", "speed=5%")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        "error: --tolerance: unknown class 'speed' (known: overlap, exposed_comm, busbw, energy, power, throttle)"
    ]


def test_baseline_refuses_to_overwrite(tmp_path: Path) -> None:
    out = _valid_baseline(tmp_path)
    before = out.read_bytes()
    r = _cli("baseline", str(tmp_path / "whatever"), "-o", str(out))
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: {out}: already exists; pass --force to overwrite it"
    assert out.read_bytes() == before


# ---------------------------------------------------------------------------
# baseline + check end to end on a real trace (the team's shared A100 profile)
# ---------------------------------------------------------------------------


def _stretch_nccl_kernels(src: Path, dst: Path, factor: float) -> int:
    """Copy a Kineto profile, multiplying the duration of every NCCL kernel by ``factor``."""
    import gzip

    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    n = 0
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "kernel" and str(ev.get("name", "")).startswith("ncclKernel"):
            ev["dur"] = ev["dur"] * factor
            n += 1
    dst.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=1))
    return n


def test_check_real_trace_against_itself_and_a_slower_copy(tmp_path: Path) -> None:
    import gzip

    src = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    base = tmp_path / "a100.baseline.json"
    r = _cli("baseline", str(src), "-o", str(base))
    assert r.exit_code == 0, r.output
    doc = json.loads(base.read_text())
    keys = {m["key"] for m in doc["metrics"]}
    # one overlap and one exposed-comm metric per ProfilerStep plus the whole trace
    events = orjson.loads(gzip.decompress(src.read_bytes()))["traceEvents"]
    steps = {
        int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
    }
    assert {k for k in keys if k.startswith("overlap_pct/")} == {
        f"overlap_pct/rank=0/step={s}" for s in [*sorted(steps), "all"]
    }
    assert doc["input"]["name"] == src.name and "/" not in doc["input"]["name"]
    # one busbw metric per (collective, size bucket) seen among the NCCL kernels
    colls = {
        e["args"]["Collective name"]
        for e in events
        if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})
    }
    assert {k.split("/")[1].removeprefix("coll=") for k in keys if k.startswith("busbw_median_gbps/")} == {
        c.replace("allreduce", "all_reduce") for c in colls
    }

    same = _cli("check", str(src), "--baseline", str(base))
    assert same.exit_code == 0, same.output
    assert f"{len(keys)} within" in same.output

    slow = tmp_path / "slow.json.gz"
    assert _stretch_nccl_kernels(src, slow, 2.0) > 0
    bad = _cli("check", str(slow), "--baseline", str(base))
    assert bad.exit_code == 1, bad.output
    assert "regressions" in bad.output
    for k in keys:
        if k.startswith("busbw_median_gbps/"):  # half the bandwidth: every bucket regressed
            assert k in bad.output and "regressed" in bad.output
    cmp = json.loads(_cli("check", str(slow), "--baseline", str(base), "--format", "json").output)
    st = {c["key"]: c for c in cmp["changes"]}
    for k in keys:
        if k.startswith("busbw_median_gbps/"):
            assert st[k]["status"] == "regressed"
            assert st[k]["relative"] == pytest.approx(-0.5, abs=0.01)
    assert st["exposed_comm_ms/rank=0/step=all"]["status"] == "regressed"
    # a loose enough tolerance lets it pass: the tolerance really is applied
    loose = _cli(
        "check", str(slow), "--baseline", str(base), "--tolerance",
        "busbw=60%,exposed_comm=1000%,overlap=100pp",
    )  # fmt: skip
    assert loose.exit_code == 0, loose.output


# ---------------------------------------------------------------------------
# Every fixture trace against the baseline kept beside it, and perturbed copies
# ---------------------------------------------------------------------------

FIXTURE_TRACES = fixture_traces()


def _stretch_comm(run: Run, factor: int) -> Run:
    """The same run with every collective / send / recv node ``factor`` times longer."""
    out = {}
    for r, t in run.traces.items():
        d = pl.col("dur_ns")
        nodes = t.nodes.with_columns(
            pl.when(pl.col("coll_type").is_not_null()).then(d * factor).otherwise(d).alias("dur_ns")
        )
        out[r] = dataclasses.replace(t, nodes=nodes)
    return Run(traces=out, manifest=run.manifest)


def _scale_power(run: Run, factor: float) -> Run:
    out = {}
    for r, t in run.traces.items():
        tel = t.telemetry.with_columns(pl.col("power_w") * factor, pl.col("energy_j") * factor)
        out[r] = dataclasses.replace(t, telemetry=tel)
    return Run(traces=out, manifest=run.manifest)


@pytest.mark.parametrize("fixture", FIXTURE_TRACES, ids=lambda p: p.name)
def test_fixture_is_within_its_baseline(fixture: Path) -> None:
    base = baseline_path(fixture)
    assert base.exists(), (
        f"no baseline beside {fixture.name}: run `python tests/regen_baselines.py {fixture.name}`"
    )
    doc = json.loads(base.read_text())
    assert doc["input"]["name"] == fixture.name
    r = _cli("check", str(fixture), "--baseline", str(base))
    hint = (
        f"if an analysis changed on purpose: `python tests/regen_baselines.py {fixture.name}`, review, commit"
    )
    assert r.exit_code == 0, f"{r.output}\n{hint}"
    assert f"check OK: {len(doc['metrics'])} metrics ({len(doc['metrics'])} within)" in r.output


@pytest.mark.parametrize("fixture", FIXTURE_TRACES, ids=lambda p: p.name)
def test_fixture_perturbed_fails_check(fixture: Path, tmp_path: Path) -> None:
    from charllm_trace.et.writer import write_run
    from charllm_trace.inputs.loader import load

    base = baseline_path(fixture)
    keys = {m["key"] for m in json.loads(base.read_text())["metrics"]}
    run = load(fixture)

    # control: the same run, rewritten as Chakra ETs, is still within the baseline
    write_run(run, tmp_path / "same")
    same = _cli("check", str(tmp_path / "same"), "--baseline", str(base))
    assert same.exit_code == 0, same.output

    n_comm = sum(int(t.nodes["coll_type"].is_not_null().sum()) for t in run)
    if n_comm:
        write_run(_stretch_comm(run, 3), tmp_path / "slow")
        r = _cli("check", str(tmp_path / "slow"), "--baseline", str(base), "--format", "json")
        assert r.exit_code == 1, r.output
        st = {c["key"]: c["status"] for c in json.loads(r.output)["changes"]}
        busbw = [k for k in keys if k.startswith("busbw_median_gbps/")]
        # a one-rank group (the H200 fixture) has bus factor 0: no busbw metric, exposed comm only
        one_rank_groups = {len(pg.ranks) for t in run for pg in t.meta.process_groups} <= {1}
        assert (busbw or one_rank_groups) and all(st[k] == "regressed" for k in busbw)
        exposed = [k for k in keys if k.startswith("exposed_comm_ms/") and k.endswith("step=all")]
        assert exposed and all(st[k] == "regressed" for k in exposed)
        table = _cli("check", str(tmp_path / "slow"), "--baseline", str(base))
        assert table.exit_code == 1
        assert "regressions" in table.output and (busbw or exposed)[0] in table.output

    n_power = sum(int(t.telemetry["power_w"].is_not_null().sum()) for t in run)
    if n_power:
        write_run(_scale_power(run, 1.3), tmp_path / "hot")
        r = _cli("check", str(tmp_path / "hot"), "--baseline", str(base), "--format", "json")
        assert r.exit_code == 1, r.output
        st = {c["key"]: c["status"] for c in json.loads(r.output)["changes"]}
        for k in keys:
            if k.startswith(("power_peak_w/", "power_mean_w/")) or k.endswith("/total"):
                assert st[k] == "regressed", k
    assert n_comm or n_power, "a fixture with neither communication nor telemetry guards nothing"


def _with_telemetry(run: Run, period_ns: int = 10_000_000) -> Run:
    """The run with a power trace added to every rank (a saw-tooth between 100 and 200 W, sampled
    every ``period_ns`` over the rank's span) and the energy counter that integrates it."""
    import numpy as np

    out = {}
    for r, t in run.traces.items():
        n = t.nodes.filter(pl.col("start_ns").is_not_null())
        t0 = int(n["start_ns"].min())
        t1 = int((n["start_ns"] + n["dur_ns"].fill_null(0)).max())
        times = np.arange(t0 - period_ns, t1 + 2 * period_ns, period_ns, dtype=np.int64)
        power = 100.0 + 25.0 * (np.arange(times.size) % 5)
        dt = np.diff(times) / 1e9
        energy = np.concatenate([[0.0], np.cumsum((power[1:] + power[:-1]) / 2 * dt)])
        tel = pl.DataFrame(
            {
                "time_ns": times,
                "device": np.zeros(times.size, dtype=np.int32),
                "power_w": power,
                "energy_j": energy,
                "power_limit_w": np.full(times.size, 400.0),
                "throttle_reasons": np.zeros(times.size, dtype=np.int64),
            }
        )
        out[r] = dataclasses.replace(t, telemetry=tel)
    return Run(traces=out, manifest=run.manifest)


def test_higher_power_fails_check_on_energy_and_power(tmp_path: Path) -> None:
    from charllm_trace.et.writer import write_run
    from charllm_trace.inputs.loader import load

    fx = [f for f in FIXTURE_TRACES if f.name == "cpu-2rank-gloo"]
    if not fx:
        pytest.skip("fixture cpu-2rank-gloo is absent")
    run = _with_telemetry(load(fx[0]))
    write_run(run, tmp_path / "run")
    base = tmp_path / "b.json"
    assert _cli("baseline", str(tmp_path / "run"), "-o", str(base)).exit_code == 0
    keys = {m["key"]: m["class"] for m in json.loads(base.read_text())["metrics"]}
    for r in run.ranks:
        for k in (f"power_peak_w/rank={r}/device=0", f"power_mean_w/rank={r}/device=0"):
            assert keys[k] == "power"
        assert keys[f"energy_j/rank={r}/device=0/total"] == "energy"
        assert keys[f"throttle_ms/rank={r}/device=0"] == "throttle"

    write_run(_scale_power(run, 1.3), tmp_path / "hot")
    r = _cli("check", str(tmp_path / "hot"), "--baseline", str(base), "--format", "json")
    assert r.exit_code == 1, r.output
    ch = {c["key"]: c for c in json.loads(r.output)["changes"]}
    for k, cls in keys.items():
        if cls in ("power", "energy") and ch[k]["old"] > 0:
            assert ch[k]["status"] == "regressed", k
            assert ch[k]["relative"] == pytest.approx(0.3, rel=1e-6), k
        elif cls in ("overlap", "exposed_comm", "busbw", "throttle"):
            assert ch[k]["status"] == "within", k  # only power changed
    # 35% energy/power tolerance lets it through
    ok = _cli("check", str(tmp_path / "hot"), "--baseline", str(base), "--tolerance", "energy=35%,power=35%")
    assert ok.exit_code == 0, ok.output


def test_check_reuses_the_options_the_baseline_was_made_with(tmp_path: Path) -> None:
    src = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    plain, hta = tmp_path / "plain.json", tmp_path / "hta.json"
    assert _cli("baseline", str(src), "-o", str(plain)).exit_code == 0
    assert _cli("baseline", str(src), "-o", str(hta), "--hta-compat").exit_code == 0
    a = {m["key"]: m["value"] for m in json.loads(plain.read_text())["metrics"]}
    b = json.loads(hta.read_text())
    assert b["input"]["options"]["hta_compat"] is True
    vb = {m["key"]: m["value"] for m in b["metrics"]}
    # HTA's filter drops the kernels launched after the last step begins: the whole-trace figure moves
    assert vb["exposed_comm_ms/rank=0/step=all"] < a["exposed_comm_ms/rank=0/step=all"]
    # ... and check, given no flag, analyses the run the way its baseline was made
    r = _cli("check", str(src), "--baseline", str(hta))
    assert r.exit_code == 0, r.output


def test_check_table_lists_failures_or_everything() -> None:
    from rich.console import Console

    from charllm_trace.render.regress import print_check

    old = [
        _m("overlap_pct/rank=0/step=1", "overlap", 60.0),
        _m("energy_j/rank=0/phase=forward", "energy", 100.0),
    ]
    new = [
        _m("overlap_pct/rank=0/step=1", "overlap", 55.0),
        _m("energy_j/rank=0/phase=forward", "energy", 101.0),
    ]
    cmp = compare(old, new)

    def out(show_all: bool) -> str:
        c = Console(record=True, width=200)
        print_check(cmp, c, show_all=show_all)
        return c.export_text()

    failing = out(False)
    assert "overlap_pct/rank=0/step=1" in failing and "-5.00pp" in failing and "2pp" in failing
    assert "energy_j/rank=0/phase=forward" not in failing  # +1 % is within 5 %
    assert failing.strip().endswith("check FAILED: 2 metrics (1 regressed, 1 within)")
    everything = out(True)
    assert "energy_j/rank=0/phase=forward" in everything and "+1 (+1.0%)" in everything


def test_baseline_of_a_trace_without_communication_or_telemetry_exits_2(tmp_path: Path) -> None:
    import gzip

    src = shared_trace("hta/simple_add_kineto.json.gz")
    events = orjson.loads(gzip.decompress(src.read_bytes()))["traceEvents"]
    assert not any("nccl" in str(e.get("name", "")).lower() for e in events)  # nothing to guard
    out = tmp_path / "b.json"
    r = _cli("baseline", str(src), "-o", str(out))
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {src}: nothing to record in a baseline (")
    assert "overlap: no communication" in lines[0] and "energy: no telemetry" in lines[0]
    assert not out.exists()


def test_communication_moved_out_of_compute_fails_on_overlap(tmp_path: Path) -> None:
    """Every NCCL kernel moved after the last event of the trace: nothing overlaps any more."""
    import gzip

    src = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    base = tmp_path / "b.json"
    assert _cli("baseline", str(src), "-o", str(base)).exit_code == 0
    old = {m["key"]: m["value"] for m in json.loads(base.read_text())["metrics"]}

    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    evs = doc["traceEvents"]
    t = max(e["ts"] + e.get("dur", 0) for e in evs if e.get("ph") == "X") + 10
    for e in evs:
        if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel"):
            e["ts"], t = t, t + e["dur"] + 10
    moved = tmp_path / "moved.json.gz"
    moved.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=1))

    r = _cli("check", str(moved), "--baseline", str(base), "--format", "json")
    assert r.exit_code == 1
    ch = {c["key"]: c for c in json.loads(r.output)["changes"]}
    overlap = [k for k in old if k.startswith("overlap_pct/")]
    assert len(overlap) >= 2 and all(old[k] > 2.0 for k in overlap)  # the baseline had overlap to lose
    # steps are GPU-time windows (docs/analyses.md, "Steps"): every moved kernel runs in the last
    # step's window, so that step and the whole trace lose their overlap, and the earlier steps
    # have no communication left in theirs (no ratio: "missing")
    steps = sorted(int(k.rsplit("=", 1)[1]) for k in overlap if not k.endswith("=all"))
    assert len(steps) == 3
    for k in ("overlap_pct/rank=0/step=all", f"overlap_pct/rank=0/step={steps[-1]}"):
        assert ch[k]["status"] == "regressed", k
        assert ch[k]["new"] == pytest.approx(0.0, abs=1e-9)
        exposed = k.replace("overlap_pct/", "exposed_comm_ms/")
        assert ch[exposed]["status"] == "regressed", exposed
    for s in steps[:-1]:
        assert ch[f"overlap_pct/rank=0/step={s}"]["status"] == "missing"
    assert all(
        ch[k]["status"] == "within" for k in old if k.startswith("busbw_median_gbps/")
    )  # durations unchanged
    table = _cli("check", str(moved), "--baseline", str(base))
    assert table.exit_code == 1
    assert "overlap_pct/rank=0/step=all" in table.output
    assert f"{-old['overlap_pct/rank=0/step=all']:+.2f}pp" in table.output  # the change, new 0 minus old
