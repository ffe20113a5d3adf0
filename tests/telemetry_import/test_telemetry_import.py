"""``charllm-trace telemetry import``: the five tools' real log formats read into the model's
telemetry (values, units, Unix-epoch ns with the time zone), attached to a collected run or
written into an ET, and the energy and power analyses on the result (issue 14 item 5).

The logs are in tests/fixtures/telemetry_logs (written by hand in each tool's documented format;
README.md there cites the sources)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from charllm_trace.analysis import analyze_run
from charllm_trace.cli.app import main
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run
from charllm_trace.inputs.loader import load
from charllm_trace.telemetry_import import read_log
from charllm_trace.telemetry_import.common import ParseOptions
from tests.conftest import shared_trace

LOGS = Path(__file__).parents[1] / "fixtures" / "telemetry_logs"
GLOO = Path(__file__).parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"
LA = "America/Los_Angeles"  # where the nvidia-smi fixture was "recorded": 17:15 PDT = 00:15 UTC


def dev(log, d: int) -> pl.DataFrame:
    return log.samples.filter(pl.col("device") == d).sort("time_ns")


def trapezoid_j(t_ns: list[int], p_w: list[float]) -> float:
    dt = np.diff(np.array(t_ns, dtype=np.int64)) / 1e9  # differences of integer ns: exact
    p = np.array(p_w, dtype=np.float64)
    return float(np.sum((p[1:] + p[:-1]) / 2 * dt))


# --- parsers ----------------------------------------------------------------------------------


def test_nvidia_smi_values_units_and_local_times() -> None:
    log = read_log(LOGS / "nvidia-smi-a100.csv", "nvidia-smi", ParseOptions(tz=LA))
    assert log.devices == [0, 1] and log.samples.height == 24
    g0 = dev(log, 0)
    # 2024/05/22 17:15:22.204 in Los Angeles (PDT, UTC-7) is 2024-05-23 00:15:22.204 UTC
    assert g0["time_ns"][0] == 1_716_423_322_204_000_000
    assert g0["power_w"].to_list()[:3] == [92.41, 95.03, 187.52]  # "92.41 W" -> 92.41
    assert g0["sm_clock_mhz"][4] == 1395.0 and g0["mem_clock_mhz"][0] == 1593.0  # "1395 MHz"
    assert g0["util_pct"][2] == 41.0 and g0["temp_c"][0] == 38.0 and g0["mem_temp_c"][0] == 41.0
    assert g0["power_limit_w"][0] == 400.0
    assert g0["throttle_reasons"].to_list()[3:6] == [0, 4, 0]  # 0x0000000000000004: SW power cap
    g1 = dev(log, 1)
    assert g1["power_w"][3] is None and g1["util_pct"][3] is None  # [N/A] -> null, not 0
    assert g1["temp_c"][3] == 37.0
    assert log.uuids[1] == "GPU-0b8e77d3-5c2a-4e61-a9f0-7e3d2c6b1f42"
    assert log.rate_hz() == pytest.approx(1e9 / 102_000_000, rel=1e-3)  # gaps of 101-102 ms
    assert not log.tz_assumed and log.tz == LA
    utc = read_log(LOGS / "nvidia-smi-a100.csv", "nvidia-smi", ParseOptions(tz="UTC"))
    assert (dev(log, 0)["time_ns"] - dev(utc, 0)["time_ns"]).unique().to_list() == [7 * 3600 * 10**9]


def test_nvidia_smi_without_zone_says_its_assumption(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    log = read_log(LOGS / "nvidia-smi-a100.csv", "nvidia-smi")
    assert log.tz_assumed and log.tz == "Asia/Tokyo"
    assert any("no time zone" in n and "Asia/Tokyo" in n and "assumption" in n for n in log.notes)
    # 17:15:22.204 in Tokyo (UTC+9) is 08:15:22.204 UTC
    assert dev(log, 0)["time_ns"][0] == 1_716_423_322_204_000_000 - 16 * 3600 * 10**9


def test_clock_offset_shifts_every_sample() -> None:
    base = read_log(LOGS / "nvidia-smi-a100.csv", "nvidia-smi", ParseOptions(tz=LA))
    moved = read_log(
        LOGS / "nvidia-smi-a100.csv", "nvidia-smi", ParseOptions(tz=LA, clock_offset_ns=-250_000_000)
    )
    assert (moved.samples["time_ns"] - base.samples["time_ns"]).unique().to_list() == [-250_000_000]
    assert moved.describe()["clock_offset_ns"] == -250_000_000


def test_dcgm_with_line_times() -> None:
    log = read_log(LOGS / "dcgmi-dmon-ts.log", "dcgm")
    assert log.devices == [0, 1] and log.samples.height == 10
    g0, g1 = dev(log, 0), dev(log, 1)
    assert g0["time_ns"].to_list()[:2] == [1_716_423_322_302_118_000, 1_716_423_322_404_870_000]
    assert g0["power_w"].to_list() == [92.41, 187.52, 241.803, 236.35, 205.9]
    assert g0["energy_j"][0] == pytest.approx(1_843_210.553)  # TOTEC in mJ
    assert g0["temp_c"][0] == 38.0 and g0["mem_temp_c"][0] == 41.0 and g0["sm_clock_mhz"][3] == 1395.0
    assert g1["power_w"][2] is None and g1["energy_j"][2] is None  # N/A
    assert g0["util_pct"].is_null().all()  # not recorded: null, never 0


def test_dcgm_without_times_needs_a_start() -> None:
    with pytest.raises(InputError, match="rows carry no time"):
        read_log(LOGS / "dcgmi-dmon.log", "dcgm")
    log = read_log(
        LOGS / "dcgmi-dmon.log",
        "dcgm",
        ParseOptions(start="2024-05-23 00:15:22.302", tz="UTC", interval_ms=100),
    )
    assert dev(log, 1)["time_ns"].to_list() == [1_716_423_322_302_000_000 + k * 100_000_000 for k in range(5)]
    assert "derived" in log.time_source and any("drift" in n for n in log.notes)
    assert dev(log, 0)["power_w"].to_list() == [92.41, 187.52, 241.803, 236.35, 205.9]


def test_amd_smi_monitor_csv_and_table_agree() -> None:
    csv = read_log(LOGS / "amd-smi-monitor.csv", "amd-smi")
    table = read_log(LOGS / "amd-smi-monitor.txt", "amd-smi")
    assert csv.samples.equals(table.samples)
    g0, g1 = dev(csv, 0), dev(csv, 1)
    assert g0["time_ns"].to_list() == [1_795_241_349_000_000_000 + k * 10**9 for k in range(3)]
    assert g0["power_w"].to_list() == [183.0, 247.0, 236.0]
    assert g0["temp_c"].to_list() == [47.0, 52.0, 53.0] and g0["mem_temp_c"][0] == 40.0
    assert g0["util_pct"][1] == 91.0 and g0["sm_clock_mhz"][1] == 1802.0 and g0["mem_clock_mhz"][1] == 1300.0
    assert g1["power_w"][1] is None


def test_amd_smi_metric_csv() -> None:
    log = read_log(LOGS / "amd-smi-metric.csv", "amd-smi")
    g0 = dev(log, 0)
    assert g0["power_w"].to_list() == [183.0, 247.0, 236.0]
    assert g0["temp_c"].to_list() == [47.0, 52.0, 53.0]  # hotspot (edge is N/A)
    assert (
        g0["mem_temp_c"][0] == 40.0 and g0["sm_clock_mhz"][0] == 1613.0 and g0["mem_clock_mhz"][0] == 1230.0
    )
    assert g0["util_pct"][0] == 83.0
    assert g0["energy_j"].to_list() == [1920344.125, 1920559.891, 1920801.337]


def test_rocm_smi_with_line_times() -> None:
    log = read_log(LOGS / "rocm-smi-ts.log", "rocm-smi")
    g0, g1 = dev(log, 0), dev(log, 1)
    assert g0["time_ns"].to_list() == [
        1_795_241_349_702_140_000,
        1_795_241_349_905_899_000,
        1_795_241_350_109_031_000,
    ]
    assert g0["power_w"].to_list() == [183.0, 247.0, 236.0]
    assert g0["temp_c"].to_list() == [47.0, 52.0, 53.0]  # junction, not edge (38, 40, 41)
    assert g0["sm_clock_mhz"].to_list() == [1613.0, 1802.0, 1790.0]  # "1 (1613Mhz)"
    assert g0["mem_clock_mhz"][0] == 1200.0 and g0["util_pct"][0] == 83.0 and g0["mem_temp_c"][0] == 40.0
    assert g1["power_w"][1] is None


def test_zeus_power_monitor_and_study_csv() -> None:
    log = read_log(LOGS / "zeus-powermonitor.csv", "zeus")
    assert log.devices == [0, 1] and log.samples.height == 16
    g1 = dev(log, 1)
    assert g1["time_ns"][0] == 1_795_241_349_700_341_200  # Unix seconds to ns, exact to the digits
    assert g1["power_w"].to_list()[:3] == [58.904, 59.377, 97.215]
    assert log.rate_hz() == pytest.approx(20.0, rel=0.01)
    study = read_log(LOGS / "zeus-study.csv", "zeus")
    assert dev(study, 1)["power_w"].to_list() == [88.17, 88.25, 88.60]
    assert dev(study, 0)["time_ns"][2] == 1_716_423_322_301_500_000


# --- attaching --------------------------------------------------------------------------------


def run_cli(*args: str):
    return CliRunner().invoke(main, ["telemetry", "import", *args])


@pytest.fixture
def gloo_run(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(GLOO, d)
    return d


def test_attach_to_collected_run_gives_energy(gloo_run: Path) -> None:
    r = run_cli(
        str(gloo_run), str(LOGS / "zeus-powermonitor.csv"), "--format", "zeus", "--device-map", "0=0,1=1"
    )
    assert r.exit_code == 0, r.output
    assert (gloo_run / "telemetry-vm-import.csv").is_file() and (
        gloo_run / "telemetry-vm-import.meta.json"
    ).is_file()
    an = analyze_run(load(gloo_run, cache=False))
    assert an.energy is not None and an.power is not None
    tot = an.energy.totals.sort("rank")
    log = read_log(LOGS / "zeus-powermonitor.csv", "zeus")
    for rank in (0, 1):
        g = dev(log, rank)
        assert tot.filter(pl.col("rank") == rank)["total_j"][0] == pytest.approx(
            trapezoid_j(g["time_ns"].to_list(), g["power_w"].to_list()), rel=1e-12
        )
        assert tot.filter(pl.col("rank") == rank)["n_samples"][0] == 8
    assert any("zeus log zeus-powermonitor.csv" in n and "19.9 Hz" in n for n in an.energy.notes)
    assert any("zeus log zeus-powermonitor.csv" in n for n in an.power.notes)
    html = gloo_run.parent / "report.html"
    rep = CliRunner().invoke(main, ["report", str(gloo_run), "-o", str(html)])
    assert rep.exit_code == 0, rep.output
    assert "samples imported from the zeus log zeus-powermonitor.csv, 19.9 Hz" in html.read_text()
    # a second import replaces only with --force, and only the import's own files
    again = run_cli(
        str(gloo_run), str(LOGS / "zeus-powermonitor.csv"), "--format", "zeus", "--device-map", "0=0,1=1"
    )
    assert again.exit_code == 2 and "already exists" in again.stderr
    forced = run_cli(
        str(gloo_run),
        str(LOGS / "zeus-powermonitor.csv"),
        "--format",
        "zeus",
        "--device-map",
        "0=1,1=0",
        "--force",
    )
    assert forced.exit_code == 0, forced.output


def test_device_map_maps_tool_gpu_to_rank(gloo_run: Path) -> None:
    r = run_cli(
        str(gloo_run), str(LOGS / "rocm-smi-ts.log"), "--format", "rocm-smi", "--device-map", "1=0,0=1"
    )
    assert r.exit_code == 0, r.output
    assert "rank 0 <- GPU 1" in r.stdout and "rank 1 <- GPU 0" in r.stdout
    run = load(gloo_run, cache=False)
    assert run.traces[0].telemetry["power_w"].to_list() == [143.0, None, 221.0]  # card1's
    assert run.traces[1].telemetry["power_w"].to_list() == [183.0, 247.0, 236.0]  # card0's
    assert run.traces[0].meta.extra["telemetry_source"]["tool"] == "rocm-smi"


def test_cpu_run_without_device_map_is_refused(gloo_run: Path) -> None:
    r = run_cli(str(gloo_run), str(LOGS / "zeus-powermonitor.csv"), "--format", "zeus")
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert "\n" not in line and str(gloo_run) in line and "recorded no GPU" in line


def test_energy_on_shared_kineto_profile_with_imported_nvidia_smi_log(tmp_path: Path) -> None:
    prof = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    before = prof.stat().st_mtime_ns, prof.stat().st_size
    out = tmp_path / "a100.et"
    r = run_cli(
        str(prof), str(LOGS / "nvidia-smi-a100.csv"), "--format", "nvidia-smi", "--tz", LA, "-o", str(out)
    )
    assert r.exit_code == 0, r.output
    assert "rank 0 <- GPU 0" in r.stdout
    assert (prof.stat().st_mtime_ns, prof.stat().st_size) == before  # the input is untouched
    run = load(out, cache=False)
    tr = run.traces[0]
    assert tr.telemetry.height == 12 and tr.telemetry["device"].unique().to_list() == [0]
    an = analyze_run(run)
    assert an.energy is not None and an.power is not None, an.skipped
    tot = an.energy.totals
    g0 = dev(read_log(LOGS / "nvidia-smi-a100.csv", "nvidia-smi", ParseOptions(tz=LA)), 0)
    assert tot["total_j"][0] == pytest.approx(
        trapezoid_j(g0["time_ns"].to_list(), g0["power_w"].to_list()), rel=1e-12
    )
    assert tot["operators_j"][0] > 0  # the profile's kernels ran inside the samples' window
    assert an.power.per_step["peak_w"].max() == 241.8
    assert any(
        "nvidia-smi log nvidia-smi-a100.csv" in n and "9.8 Hz" in n and LA in n for n in an.energy.notes
    )
    # the output is replaced only with --force, and never a file the command did not write
    again = run_cli(
        str(prof), str(LOGS / "nvidia-smi-a100.csv"), "--format", "nvidia-smi", "--tz", LA, "-o", str(out)
    )
    assert again.exit_code == 2 and "--force" in again.stderr
    forced = run_cli(
        str(prof),
        str(LOGS / "nvidia-smi-a100.csv"),
        "--format",
        "nvidia-smi",
        "--tz",
        LA,
        "-o",
        str(out),
        "--force",
    )
    assert forced.exit_code == 0, forced.output
    foreign = tmp_path / "other.et"
    foreign.write_bytes(b"not ours")
    r = run_cli(
        str(prof),
        str(LOGS / "nvidia-smi-a100.csv"),
        "--format",
        "nvidia-smi",
        "--tz",
        LA,
        "-o",
        str(foreign),
        "--force",
    )
    assert r.exit_code == 2 and "was not written by" in r.stderr and foreign.read_bytes() == b"not ours"


def test_wrong_zone_is_refused_for_an_et(tmp_path: Path) -> None:
    prof = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    r = run_cli(
        str(prof),
        str(LOGS / "nvidia-smi-a100.csv"),
        "--format",
        "nvidia-smi",
        "--tz",
        "UTC",
        "-o",
        str(tmp_path / "x.et"),
    )
    assert r.exit_code == 2
    assert "nvidia-smi-a100.csv" in r.stderr and "time zone" in r.stderr and not (tmp_path / "x.et").exists()


# --- bad logs ---------------------------------------------------------------------------------


def _mutated(tmp_path: Path, name: str, old: str, new: str, count: int = 1) -> Path:
    p = tmp_path / name
    text = (LOGS / name).read_text()
    assert old in text
    p.write_text(text.replace(old, new, count))
    return p


def _empty(p: Path) -> Path:
    p.write_text("")
    return p


@pytest.mark.parametrize(
    ("make", "fmt", "words"),
    [
        (lambda d: LOGS / "nvidia-smi-noheader.csv", "nvidia-smi", "no header line"),
        (
            lambda d: _mutated(d, "nvidia-smi-a100.csv", "92.41 W", "92.41 MHz"),
            "nvidia-smi",
            "not a unit of W",
        ),
        (lambda d: _mutated(d, "nvidia-smi-a100.csv", "95.03 W", "lots W"), "nvidia-smi", "is not a number"),
        (
            lambda d: _mutated(d, "nvidia-smi-a100.csv", "2024/05/22 17:15:22.306", "22.05.2024 17:15"),
            "nvidia-smi",
            "not a time",
        ),
        (lambda d: _mutated(d, "dcgmi-dmon-ts.log", "#Entity", "Entity"), "dcgm", "no '#Entity' header"),
        (
            lambda d: _mutated(d, "dcgmi-dmon-ts.log", "1410         1593\n", "1410\n"),
            "dcgm",
            "values, the header names",
        ),
        (
            lambda d: _mutated(d, "amd-smi-metric.csv", "timestamp,gpu", "time,gpu"),
            "amd-smi",
            "no timestamp",
        ),
        (
            lambda d: _mutated(d, "rocm-smi-ts.log", "device,", "dev,", -1),
            "rocm-smi",
            "no 'device,...' header",
        ),
        (
            lambda d: _mutated(d, "zeus-study.csv", "timestamp,gpu0,gpu1", "when,gpu0,gpu1"),
            "zeus",
            "not time/timestamp",
        ),
        (lambda d: LOGS / "zeus-study.csv", "nvidia-smi", "header must name timestamp and index"),
        (lambda d: _empty(d / "empty.csv"), "zeus", "is empty"),
    ],
)
def test_bad_logs_one_line_exit_2(tmp_path: Path, gloo_run: Path, make, fmt: str, words: str) -> None:
    log = make(tmp_path)
    r = run_cli(str(gloo_run), str(log), "--format", fmt, "--device-map", "0=0,1=1", "--tz", "UTC")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert log.name in lines[0] and words in lines[0], lines[0]
    assert "Traceback" not in r.output


def test_bad_options_are_usage_errors(gloo_run: Path) -> None:
    r = run_cli(str(gloo_run), str(LOGS / "zeus-study.csv"), "--format", "zeus", "--clock-offset", "soon")
    assert r.exit_code == 2 and "--clock-offset" in r.output
    r = run_cli(
        str(gloo_run), str(LOGS / "zeus-study.csv"), "--format", "zeus", "--device-map", "gpu0->rank0"
    )
    assert r.exit_code == 2 and "GPU=RANK" in r.output
    r = run_cli(
        str(gloo_run), str(LOGS / "nvidia-smi-a100.csv"), "--format", "nvidia-smi", "--tz", "Mars/Olympus"
    )
    assert r.exit_code == 2 and "unknown time zone" in r.stderr


def test_variants_of_the_real_formats(tmp_path: Path) -> None:
    """nvidia-smi with ``nounits``, a log cut off mid-line (the tool was killed), dmon's header
    printed again every 14 polls: the same samples."""
    import re

    full = read_log(LOGS / "nvidia-smi-a100.csv", "nvidia-smi", ParseOptions(tz=LA))
    nounits = tmp_path / "nounits.csv"
    nounits.write_text(
        re.sub(r" (W|MHz|%)(?=,|$)", "", (LOGS / "nvidia-smi-a100.csv").read_text(), flags=re.M)
    )
    assert (
        "250" not in nounits.read_text().split("\n")[1] and " W," not in nounits.read_text().split("\n", 1)[1]
    )
    assert read_log(nounits, "nvidia-smi", ParseOptions(tz=LA)).samples.equals(full.samples)
    cut = tmp_path / "cut.csv"
    text = (LOGS / "nvidia-smi-a100.csv").read_text()
    cut.write_text(text[: len(text) - 30])  # the last line loses its end and its newline
    got = read_log(cut, "nvidia-smi", ParseOptions(tz=LA)).samples
    assert got.height == 23 and got.equals(
        full.samples.filter((pl.col("time_ns") < full.samples["time_ns"].max()) | (pl.col("device") == 0))
    )
    dmon = (LOGS / "dcgmi-dmon-ts.log").read_text().split("\n")
    again = dmon[:6] + [dmon[0], dmon[1]] + dmon[6:]  # the two header lines once more, mid-log
    rep = tmp_path / "dmon.log"
    rep.write_text("\n".join(again))
    assert read_log(rep, "dcgm").samples.equals(read_log(LOGS / "dcgmi-dmon-ts.log", "dcgm").samples)


def test_clock_offset_option_shifts_the_written_samples(tmp_path: Path) -> None:
    prof = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    out = tmp_path / "shifted.et"
    args = [str(prof), str(LOGS / "nvidia-smi-a100.csv"), "--format", "nvidia-smi", "--tz", LA]
    r = run_cli(*args, "--clock-offset", "100ms", "-o", str(out))
    assert r.exit_code == 0, r.output
    tr = load(out, cache=False).traces[0]
    assert tr.telemetry["time_ns"].min() == 1_716_423_322_204_000_000 + 100_000_000
    an = analyze_run(Run.single(tr))
    assert any("clock offset +100.000 ms applied" in n for n in an.energy.notes)


def test_et_without_timestamps_is_refused(tmp_path: Path) -> None:
    et = shared_trace("chakra/feeder_tests_chakra.0.et")  # Chakra's converter: every start time 0
    r = run_cli(str(et), str(LOGS / "zeus-study.csv"), "--format", "zeus", "-o", str(tmp_path / "x.et"))
    assert r.exit_code == 2 and "feeder_tests_chakra.0.et" in r.stderr and "no timestamps" in r.stderr
    assert not (tmp_path / "x.et").exists()


@pytest.mark.parametrize(
    ("name", "fmt", "extra"),
    [
        ("amd-smi-monitor.csv", "amd-smi", []),
        ("amd-smi-monitor.txt", "amd-smi", []),
        ("rocm-smi-ts.log", "rocm-smi", []),
        ("zeus-powermonitor.csv", "zeus", []),
    ],
)
def test_every_format_attaches_and_gives_energy(
    gloo_run: Path, name: str, fmt: str, extra: list[str]
) -> None:
    r = run_cli(str(gloo_run), str(LOGS / name), "--format", fmt, "--device-map", "0=0,1=1", *extra)
    assert r.exit_code == 0, r.output
    an = analyze_run(load(gloo_run, cache=False))
    assert an.energy is not None, an.skipped
    assert (an.energy.totals["total_j"] > 0).all() and an.energy.totals.height == 2
    assert any(f"{fmt} log {name}" in n for n in an.energy.notes)


def test_dcgm_log_into_the_shared_profile(tmp_path: Path) -> None:
    prof = shared_trace("hta/a100_ddp_nccl_rank0.json.gz")
    out = tmp_path / "dcgm.et"
    r = run_cli(str(prof), str(LOGS / "dcgmi-dmon-ts.log"), "--format", "dcgm", "-o", str(out))
    assert r.exit_code == 0, r.output
    an = analyze_run(load(out, cache=False))
    assert an.energy is not None and an.energy.totals["n_samples"][0] == 5
    # dmon's TOTEC counter (mJ) is there: the integral is scaled to it, as for the collector's NVML counter
    assert an.energy.totals["counter_j"][0] == pytest.approx((1_843_297_716 - 1_843_210_553) / 1000)
    assert any("dcgmi dmon log dcgmi-dmon-ts.log" in n for n in an.energy.notes)
