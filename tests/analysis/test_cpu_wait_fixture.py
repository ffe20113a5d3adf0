"""The CPU-wait figures end to end on the real H200 run (tests/fixtures/traces/h200-1rank-nccl)
with constructed CPU scheduler telemetry beside it: counters that grow linearly (run 1/4, wait 1/2
of the wall time) give a known answer for every window, whatever the trace. ``analyze``'s JSON
gains the cpu_wait frames and nothing else changes; the Perfetto export gets the state track."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, invoke

RUN = ROOT / "tests" / "fixtures" / "traces" / "h200-1rank-nccl"
PID, TID = 627, 666  # the launching thread of the fixture (the most kernel-launch calls)
T0, T1 = 1_795_658_018_200_000_000, 1_795_658_019_010_000_000  # around the trace
STEP = 1_000_000  # a sample per ms


def _telemetry(d: Path) -> None:
    head = "time_ns,pid,tid,comm,state,utime_ticks,stime_ticks,run_ns,wait_ns,slices,vol_cs,invol_cs\n"
    rows = []
    for t in range(T0, T1 + 1, STEP):
        e = t - T0
        rows.append(f"{t},{PID},{TID},python,R,0,0,{e // 4},{e // 2},0,0,0")
        rows.append(f"{t},{PID},999,python,S,0,0,{e},0,0,0,0")  # another thread: busy, never waits
    (d / "cpusched-vm.csv").write_text(head + "\n".join(rows) + "\n")
    cg = [f"{t},{k},0,0,200000,100000" for k, t in enumerate(range(T0, T1 + 1, STEP))]
    (d / "cpusched-cgroup-vm.csv").write_text(
        "time_ns,nr_periods,nr_throttled,throttled_usec,quota_us,period_us\n" + "\n".join(cg) + "\n"
    )


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, Path]:
    base = tmp_path_factory.mktemp("cw")
    plain, tele = base / "plain", base / "tele"
    shutil.copytree(RUN, plain)
    shutil.copytree(RUN, tele)
    _telemetry(tele)
    out = []
    for d in (plain, tele):
        r = invoke("analyze", str(d), "--format", "json", "--no-cache")
        assert r.exit_code == 0, r.output[-2000:]
        out.append(json.loads(r.output))
    return out[0], out[1], tele


def test_known_answer_per_step(docs: tuple[dict, dict, Path]) -> None:
    _, doc, _ = docs
    steps = doc["frames"]["cpu_wait"]
    assert [r["step"] for r in steps] == [3, 4, 5, 6] and {r["tid"] for r in steps} == {TID}
    for r in steps:
        w = r["window_ns"]
        assert abs(r["wait_ns"] - w / 2) <= 1 and abs(r["run_ns"] - w / 4) <= 1
        assert abs(r["other_ns"] - w / 4) <= 2 and r["throttled_ns"] == 0
        # summed over the step's idle pieces, each rounded to a whole ns: within 1e-5 of the answer
        assert (
            r["gpu_idle_ns"] > 0
            and abs(r["idle_wait_ns"] - r["gpu_idle_ns"] / 2) <= 1 + r["gpu_idle_ns"] * 1e-5
        )
    for r in doc["frames"]["cpu_wait_idle"]:  # every host-blamed interval: the thread waited half of it
        assert r["end_ns"] > r["start_ns"] and 0 < r["late_ns"] <= r["dur_ns"]
        assert abs(r["wait_ns"] - r["dur_ns"] / 2) <= 1
    # thread 999 is in no trace: its samples are not used, and a note says how many
    n = (T1 - T0) // STEP + 1
    notes = doc["notes"]["cpu_wait"]
    assert notes[0] == f"CPU scheduler telemetry: {n} samples of 1 thread that appear in no trace not used"
    # every host-blamed interval is shorter than the 1-ms sampling period here: said so (exact anyway:
    # the counters are linear)
    k = len(doc["frames"]["cpu_wait_idle"])
    assert notes[1:] == [f"rank 0: 0 of 0 phase ranges and {k} of {k} host-blamed idle intervals are shorter "
                         "than the sampling period (1 ms): their run / wait split is interpolated between "
                         "samples, an estimate"]  # fmt: skip


def test_nothing_else_changes(docs: tuple[dict, dict, Path]) -> None:
    plain, doc, _ = docs
    assert not [k for k in plain["frames"] if k.startswith("cpu_wait")] and "cpu_wait" not in plain["notes"]
    assert list(doc["frames"])[-3:] == ["cpu_wait", "cpu_wait_idle", "cpu_wait_phases"]
    cut = {**doc, "frames": {k: v for k, v in doc["frames"].items() if not k.startswith("cpu_wait")},
           "notes": {k: v for k, v in doc["notes"].items() if k != "cpu_wait"}}  # fmt: skip
    assert {**cut, "source": None} == {**plain, "source": None}


def test_table_shows_the_section_and_quota(docs: tuple[dict, dict, Path]) -> None:
    _, _, tele = docs
    r = invoke("analyze", str(tele))
    assert r.exit_code == 0
    assert "is the CPU starving the GPU?" in r.output and "2.00 cores (200000 µs per 100000 µs)" in r.output


def test_perfetto_has_the_state_track(docs: tuple[dict, dict, Path], tmp_path: Path) -> None:
    _, _, tele = docs
    out = tmp_path / "t.json"
    r = invoke("export", "perfetto", str(tele), "-o", str(out), "--no-critical-path")
    assert r.exit_code == 0, r.output
    ev = json.loads(out.read_text())["traceEvents"]
    names = [e["args"]["name"] for e in ev if e.get("name") == "thread_name"]
    track = f"CPU thread {TID} state (rank 0; schedstat samples)"
    assert track in names
    tid = next(e["tid"] for e in ev if e.get("name") == "thread_name" and e["args"]["name"] == track)
    states = [e for e in ev if e.get("cat") == "cpu_state" and e["tid"] == tid]
    begins = [e for e in states if e["ph"] == "B"]
    # each 1 ms period: running 0.25 ms, runnable 0.5 ms, sleeping 0.25 ms
    assert len(begins) == 3 * ((T1 - T0) // STEP) and len(states) == 2 * len(begins)
    assert [e["name"] for e in begins[:3]] == ["running", "runnable", "sleeping"]
