"""Tables fit the terminal without cutting a number (issue 14, item 2)."""

from __future__ import annotations

import io
import json
import re

from click.testing import CliRunner
from rich.console import Console

from charllm_trace.cli.app import main
from charllm_trace.render.fit import FitTable
from tests.conftest import shared_trace


def _print(t: FitTable, width: int) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width).print(t)
    return buf.getvalue()


def _wide() -> FitTable:
    t = FitTable("T", keys=2)
    for h in ("rank", "step", "span ms", "compute ms", "comm ms", "overlap %", "exposed ms", "idle ms"):
        t.add_column(h)
    t.add_row("0", "all", "660.551", "115.656", "46.876", "15.61", "39.559", "503.051")
    t.add_row("12", "3", "12345678.901", "1.000", "2.000", "3.00", "4.000", "5.000")
    return t


def test_a_table_that_fits_is_one_table() -> None:
    out = _print(_wide(), 200)
    assert "(1/" not in out
    assert "12345678.901" in out and "503.051" in out


def test_a_wide_table_splits_repeating_its_keys_and_cuts_no_number() -> None:
    out = _print(_wide(), 40)
    lines = out.splitlines()
    assert all(len(line.rstrip()) <= 40 for line in lines), out
    parts = [line for line in lines if line.startswith("T (")]
    assert len(parts) >= 2
    # every cell is whole, and each part repeats the key columns
    for cell in ("660.551", "115.656", "46.876", "15.61", "39.559", "503.051", "12345678.901"):
        assert cell in out
    header_lines = [line for line in lines if line.startswith("rank")]
    assert len(header_lines) == len(parts)
    assert all(re.match(r"rank\s+step", h) for h in header_lines)


def test_grouped_columns_stay_together() -> None:
    t = FitTable("D", keys=1)
    t.add_column("key", "left")
    for n in range(4):
        t.add_column(f"v{n} A", group=n)
        t.add_column(f"v{n} B", group=n)
        t.add_column(f"v{n} chg", group=n)
    t.add_row("x", *[f"{n}.{k}" for n in range(4) for k in range(3)])
    out = _print(t, 40)
    for n in range(4):  # a value's A, B and change columns are in the same part
        assert any(f"v{n} A" in line and f"v{n} chg" in line for line in out.splitlines())


def test_only_text_columns_shrink() -> None:
    t = FitTable("N", keys=1)
    t.add_column("rank")
    t.add_column("operator", "left", shrink=True)
    t.add_column("ms")
    t.add_row("0", "aten::" + "x" * 80, "1234.567")
    out = _print(t, 50)
    assert "1234.567" in out and "…" in out
    assert all(len(line.rstrip()) <= 50 for line in out.splitlines())


def _numbers_of(doc: dict) -> list[str]:
    """The figures the overlap and bandwidth tables print, formatted as they print them."""
    want = []
    for r in doc["overlap"]:
        for k in ("span_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns"):
            want.append(f"{r[k] / 1e6:.3f}")
        want.append(f"{r['overlap_pct']:.2f}")
    for r in doc["bandwidth"]:
        for k in ("algbw_time_weighted_gbps", "busbw_time_weighted_gbps", "busbw_max_gbps"):
            want.append(f"{r[k]:.2f}")
        want.append(f"{r['dur_ns_total'] / 1e6:.3f}")
    for r in doc["critical_path_ops"]:
        want.append(f"{r['time_ns'] / 1e6:.3f}")
    return want


def test_analyze_a100_fits_80_columns_with_every_number_whole(cache_dir) -> None:
    path = str(shared_trace("hta/a100_ddp_nccl_rank0.json.gz"))
    runner = CliRunner()
    doc = json.loads(runner.invoke(main, ["analyze", path, "--format", "json"]).output)
    res = runner.invoke(main, ["analyze", path], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    too_long = [line for line in lines if len(line.rstrip()) > 80]
    assert not too_long, too_long
    tokens = set(re.findall(r"[-+]?\d[\d,]*\.?\d*", res.output))
    frames = doc["frames"] if "frames" in doc else doc
    missing = [n for n in _numbers_of(frames) if n not in tokens]
    assert not missing, missing
    wide = runner.invoke(main, ["analyze", path, "--wide"], env={"COLUMNS": "80"})
    assert wide.exit_code == 0
    assert max(len(line.rstrip()) for line in wide.output.splitlines()) > 80  # whole tables
    assert "(1/2)" not in wide.output
