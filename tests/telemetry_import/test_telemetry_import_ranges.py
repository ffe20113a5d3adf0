"""Imported power logs are checked like the sampler's telemetry (issue 28): values that only
show (temperatures, clocks, utilisation) outside their range are dropped with a note saying how
many; samples out of time order are said; the analysed values are unchanged otherwise."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from charllm_trace.telemetry_import import read_log
from charllm_trace.telemetry_import.common import ParseOptions

LOGS = Path(__file__).parents[1] / "fixtures" / "telemetry_logs"


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    text = (LOGS / "nvidia-smi-a100.csv").read_text()
    assert text.count(old) == 1, old
    p = tmp_path / "smi.csv"
    p.write_text(text.replace(old, new))
    return p


def test_a_temperature_out_of_range_is_dropped_with_a_note(tmp_path: Path) -> None:
    first = (LOGS / "nvidia-smi-a100.csv").read_text().split("\n")[1]
    cells = first.split(", ")
    temp_at = next(i for i, c in enumerate(cells) if c == "38")
    bad = ", ".join(cells[:temp_at] + ["65535"] + cells[temp_at + 1 :])
    log = read_log(_edited(tmp_path, first, bad), "nvidia-smi", ParseOptions(tz="UTC"))
    good = read_log(LOGS / "nvidia-smi-a100.csv", "nvidia-smi", ParseOptions(tz="UTC"))
    assert any(n.startswith("1 temp_c values outside -100..250 ignored") for n in log.notes), log.notes
    assert log.samples["temp_c"].null_count() == good.samples["temp_c"].null_count() + 1
    assert log.samples["power_w"].equals(good.samples["power_w"])  # nothing else changes


def test_samples_out_of_time_order_are_said(tmp_path: Path) -> None:
    lines = (LOGS / "zeus-powermonitor.csv").read_text().split("\n")
    p = tmp_path / "z.csv"
    p.write_text("\n".join([lines[0], lines[2], lines[1], *lines[3:]]))  # one line: both GPUs
    log = read_log(p, "zeus")
    assert any("2 samples are earlier than the sample before them" in n for n in log.notes), log.notes
    assert log.samples.filter(pl.col("device") == 0)["time_ns"].is_sorted()
    assert not any("earlier than" in n for n in read_log(LOGS / "zeus-powermonitor.csv", "zeus").notes)


def test_local_times_keep_nanoseconds_and_refuse_past_2261() -> None:
    """Local date-times are checked for the int64 range before they become ns (year 9999 wrapped
    to a negative time), and the nanoseconds a zeus_monitor file writes are kept."""
    from charllm_trace.core.errors import InputError
    from charllm_trace.telemetry_import.common import local_times_ns

    fmt = "%Y-%m-%d %H:%M:%S%.f"
    got = local_times_ns(Path("z.csv"), pl.Series(["2024-04-03 14:25:51.123456789"]), fmt, "UTC", "time")
    assert got.to_list() == [1_712_154_351_123_456_789]  # date -u -d '2024-04-03 14:25:51' +%s = 1712154351
    with pytest.raises(InputError, match="outside 1971..2261"):
        local_times_ns(Path("z.csv"), pl.Series(["9999-12-31 23:59:59.999"]), fmt, "UTC", "time")
