"""``sanitize`` remaps the process and thread ids of the CPU scheduler telemetry with the run's one
map (sanitize/csv_ids.py): the launching thread keeps the same pseudonym in the telemetry as in
the trace, so the CPU-wait figures are the same before and after, and no real id is left."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from charllm_trace.sanitize import sanitize_run
from charllm_trace.sanitize.rules import ID_BASE
from tests.analysis.test_cpu_wait_fixture import PID, RUN, TID, _telemetry
from tests.conftest import invoke


def _cpu_wait(d: Path) -> dict:
    r = invoke("analyze", str(d), "--format", "json", "--no-cache")
    assert r.exit_code == 0, r.output[-2000:]
    return json.loads(r.output)["frames"]


def test_cpusched_ids_follow_the_trace(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    _telemetry(run)
    (run / "cpusched-vm.meta.json").write_text(
        json.dumps({"format": "charllm-cpusched-csv", "root_pid": PID})
    )
    out = tmp_path / "clean"
    sanitize_run(run, out)
    rows = list(csv.DictReader((out / "cpusched-host0.csv").open()))
    pids, tids = {int(r["pid"]) for r in rows}, {int(r["tid"]) for r in rows}
    assert all(v >= ID_BASE for v in pids | tids) and PID not in pids and TID not in tids
    meta = json.loads((out / "cpusched-host0.meta.json").read_text())
    assert meta["root_pid"] in pids and meta["root_pid"] >= ID_BASE
    before, after = _cpu_wait(run), _cpu_wait(out)
    for name in ("cpu_wait", "cpu_wait_idle"):
        assert len(after[name]) == len(before[name]) > 0
        assert {r["tid"] for r in after[name]} <= tids  # the trace's pseudonym is the telemetry's
        strip = [{k: v for k, v in r.items() if k != "tid"} for r in after[name]]
        assert strip == [{k: v for k, v in r.items() if k != "tid"} for r in before[name]]
    # the cgroup file has no id column: kept as it was (its host pseudonymised in its name)
    assert (out / "cpusched-cgroup-host0.csv").read_text() == (run / "cpusched-cgroup-vm.csv").read_text()
