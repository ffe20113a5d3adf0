"""Hostile CPU scheduler telemetry in a shared run (issue 24, "Bad input"): negative times or
counters and counters going backwards are ignored with a note naming how many rows; a file that
is not the telemetry (garbage, another header) is refused in one line, exit 2, for ``analyze``
and ``cpu-wait`` alike. Thread ids that appear in no trace: tests/test_cpu_wait_fixture.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from charllm_trace.converters.cpu_sched import read_cpu_sched
from tests.conftest import ROOT, invoke

HEAD = "time_ns,pid,tid,comm,state,utime_ticks,stime_ticks,run_ns,wait_ns,slices,vol_cs,invol_cs\n"
CG_HEAD = "time_ns,nr_periods,nr_throttled,throttled_usec,quota_us,period_us\n"


def test_negative_times_and_backward_counters_ignored_with_counts(tmp_path: Path) -> None:
    body = [
        "100,1,1,python,R,1,0,10,5,1,0,1",
        "-200,1,1,python,R,2,0,20,6,2,0,1",  # a negative time
        "300,1,1,python,R,3,0,30,7,3,0,1",
        "400,1,1,python,R,4,0,40,6,4,0,1",  # wait_ns goes backwards
        "500,1,1,python,R,5,0,50,9,5,-3,1",  # a negative counter
        "600,1,1,python,R,6,0,60,10,6,0,1",
    ]
    (tmp_path / "cpusched-h.csv").write_text(HEAD + "\n".join(body) + "\n")
    cg = ["100,1,0,0,,100000", "200,2,1,50,,100000", "300,3,1,40,,100000", "-5,4,1,60,,100000"]
    (tmp_path / "cpusched-cgroup-h.csv").write_text(CG_HEAD + "\n".join(cg) + "\n")
    th, g, notes = read_cpu_sched(tmp_path)
    assert th["time_ns"].to_list() == [100, 300, 600] and g["time_ns"].to_list() == [100, 200]
    assert notes == [
        "CPU scheduler telemetry: 3 thread samples ignored (negative values or counters going backwards)",
        "CPU scheduler telemetry: 2 cgroup samples ignored (negative values or counters going backwards)",
    ]


def _run_with(tmp_path: Path, name: str, data: bytes) -> Path:
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "traces" / "cpu-2rank-gloo", run)
    (run / name).write_bytes(data)
    return run


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("cpusched-h.csv", bytes(range(256)) * 8),  # garbage
        ("cpusched-h.csv", b"time_ns,pid,tid\n1,2,3\n"),  # another table
        ("cpusched-cgroup-h.csv", b"\x1f\x8b\x08\x00garbage"),
        ("cpusched-h.csv", b""),  # empty
    ],
)
@pytest.mark.parametrize("command", ["analyze", "cpu-wait"])
def test_not_the_telemetry_one_line_exit_2(tmp_path: Path, name: str, data: bytes, command: str) -> None:
    run = _run_with(tmp_path, name, data)
    if name.startswith("cpusched-cgroup"):  # beside a good thread file
        (run / "cpusched-h.csv").write_text(HEAD + "100,1,1,python,R,1,0,10,5,1,0,1\n")
    r = invoke(command, str(run), *(["--no-cache"] if command == "analyze" else []))
    assert r.exit_code == 2, r.output[-500:]
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and "not a CPU scheduler telemetry file" in lines[0]
    assert "Traceback" not in r.output
