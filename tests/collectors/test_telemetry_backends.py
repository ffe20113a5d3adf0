"""Telemetry backends, readers and statistics; the no-GPU path is exercised for real here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.collectors.telemetry import rank_devices, read_samples, read_telemetry, telemetry_for_rank
from charllm_trace.collectors.telemetry.backends import (
    AmdSmiBackend,
    NoSource,
    NvmlBackend,
    ReplayBackend,
    open_backend,
)
from charllm_trace.collectors.telemetry.format import CSV_COLUMNS, FORMAT, format_row
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import TELEMETRY_SCHEMA
from charllm_trace.core.telemetry_stats import achieved_rate_hz, sensor_update_period_ns


def _open_or_none(cls: type) -> object | None:
    try:
        b = cls()
    except NoSource:
        return None
    b.close()
    return b


HAVE_NVIDIA = _open_or_none(NvmlBackend) is not None
HAVE_AMD = _open_or_none(AmdSmiBackend) is not None


@pytest.mark.skipif(HAVE_NVIDIA, reason="an NVIDIA GPU is present; the no-driver path cannot be exercised")
def test_nvml_without_driver_says_so() -> None:
    pynvml = pytest.importorskip("pynvml")
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):  # the environment fact we rely on
        pynvml.nvmlInit()
    with pytest.raises(NoSource, match="NVML library not found"):
        NvmlBackend()


@pytest.mark.skipif(HAVE_AMD, reason="an AMD GPU is present; the no-ROCm path cannot be exercised")
def test_amdsmi_without_rocm_says_so() -> None:
    with pytest.raises(NoSource, match="libamd_smi.so not found|amdsmi is not installed"):
        AmdSmiBackend()


@pytest.mark.skipif(HAVE_NVIDIA or HAVE_AMD, reason="a GPU is present")
def test_auto_without_gpu_is_no_source(spawn, tmp_path: Path) -> None:
    b, reasons = open_backend("auto")
    assert b is None and [r.split(":")[0] for r in reasons] == ["nvml", "amdsmi"]
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "charllm_trace.collectors.telemetry.sampler",
            "--run-dir",
            str(tmp_path),
            "--host",
            "h",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0
    assert "no power source on h" in p.stderr and "Traceback" not in p.stderr
    meta = json.loads((tmp_path / "telemetry-h.meta.json").read_text())
    assert meta["source"] is None and meta["file"] is None and meta["complete"] is True
    assert "NVML library not found" in meta["no_source_reason"]
    assert not (tmp_path / "telemetry-h.csv").exists()
    tel = read_telemetry(tmp_path)
    assert tel.height == 0 and tel.columns == [*TELEMETRY_SCHEMA, "host"]


def test_open_backend_rejects_unknown_and_bad_replay(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        open_backend("intel")
    assert open_backend("none") == (None, ["telemetry disabled"])
    b, reasons = open_backend(f"replay:{tmp_path / 'missing.csv'}")
    assert b is None and "cannot read replay stream" in reasons[0]
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(NoSource, match="t_ns and device"):
        ReplayBackend(str(tmp_path / "bad.csv"))


def _frame(rows: list[tuple[int, int, float | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"time_ns": pl.Int64, "device": pl.Int32, "power_w": pl.Float64}, orient="row"
    )


def test_sensor_update_period_from_repeated_values() -> None:
    # device 0: sampled every 10 ms, value changes every 30 ms; device 1: constant; device 2: changes every sample
    rows = [(i * 10_000_000, 0, float(i // 3)) for i in range(60)]
    rows += [(i * 10_000_000, 1, 5.0) for i in range(60)]
    rows += [(i * 10_000_000, 2, float(i)) for i in range(60)]
    per = sensor_update_period_ns(_frame(rows))
    assert per == {0: 30_000_000, 1: None, 2: 10_000_000}
    rates = achieved_rate_hz(_frame(rows))
    assert rates[0] == pytest.approx(100.0)
    assert sensor_update_period_ns(_frame([])) == {}


def test_read_samples_rejects_other_files(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="unexpected header"):
        read_samples(p)
    p.write_text(",".join(CSV_COLUMNS) + "\n" + "1,0,x,,,,,,,,\n")
    with pytest.raises(InputError, match="does not parse"):
        read_samples(p)
    p.write_text(
        ",".join(CSV_COLUMNS) + "\n" + format_row(5, 1, (250.5, 10.0, None, None, None, None, 80.0, 700.0, 4))
    )
    df = read_samples(p)
    assert df.schema == pl.Schema(TELEMETRY_SCHEMA)
    assert df.row(0) == (5, 1, 250.5, 10.0, None, None, None, None, 80.0, 700.0, 4)


def test_rank_to_device_mapping_by_uuid(tmp_path: Path) -> None:
    # Two ranks on host "n1" whose CUDA ordinals are remapped (CUDA_VISIBLE_DEVICES=3,1).
    meta = {
        "format": FORMAT,
        "host": "n1",
        "file": "telemetry-n1.csv",
        "devices": [{"index": i, "uuid": f"GPU-000{i}"} for i in range(4)],
    }
    (tmp_path / "telemetry-n1.meta.json").write_text(json.dumps(meta))
    rows = "".join(
        format_row(t, d, (100.0 + d, None, None, None, None, None, None, None, None))
        for t in (1, 2)
        for d in range(4)
    )
    (tmp_path / "telemetry-n1.csv").write_text(",".join(CSV_COLUMNS) + "\n" + rows)
    for rank, (ordinal, uuid) in enumerate([(0, "GPU-0003"), (1, "GPU-0001")]):
        info = {"rank": rank, "hostname": "n1", "device": {"index": ordinal, "uuid": uuid}}
        (tmp_path / f"rank-{rank}.info.json").write_text(json.dumps(info))
    (tmp_path / "rank-2.info.json").write_text(json.dumps({"rank": 2, "hostname": "n1", "device": None}))
    assert rank_devices(tmp_path) == {0: ("n1", 3), 1: ("n1", 1), 2: ("n1", None)}
    t0 = telemetry_for_rank(tmp_path, 0)
    assert t0.schema == pl.Schema(TELEMETRY_SCHEMA) and t0["power_w"].to_list() == [103.0, 103.0]
    assert telemetry_for_rank(tmp_path, 2).height == 0


def _gpu_backend() -> object:
    if HAVE_NVIDIA:
        return NvmlBackend()
    if HAVE_AMD:
        return AmdSmiBackend()
    pytest.skip("no NVIDIA or AMD GPU on this machine (NVML and AMD SMI both report no device)")


@pytest.mark.gpu
def test_real_gpu_backend_reads_power_and_energy() -> None:
    b = _gpu_backend()
    try:
        assert b.devices and all(d.get("name") for d in b.devices)
        first = [b.read(i) for i in range(len(b.devices))]
        for i, v in enumerate(first):
            dom = b.devices[i].get("power_domain")
            if dom is None or dom["reported_on"] == i:
                assert v[0] is not None and 0 < v[0] < 2000  # W
            assert v[2] is None or 0 < v[2] < 120  # deg C
    finally:
        b.close()


@pytest.mark.gpu
@pytest.mark.slow
def test_real_gpu_sampler_rate(spawn, tmp_path: Path) -> None:
    _gpu_backend()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "charllm_trace.collectors.telemetry.sampler",
            "--run-dir",
            str(tmp_path),
            "--duration",
            "3",
            "--host",
            "g",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    meta = json.loads((tmp_path / "telemetry-g.meta.json").read_text())
    assert meta["source"] in ("nvml", "amdsmi") and meta["achieved_hz"] > 50
    df = read_samples(tmp_path / "telemetry-g.csv")
    assert df.height > 0
    for d in df["device"].unique().to_list():
        assert df.filter(pl.col("device") == d)["energy_j"].drop_nulls().is_sorted()  # a cumulative counter
