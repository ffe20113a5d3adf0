"""``collect --cpus N`` (issue 24 item 5): the allocation is planned, applied in each rank process
(read back from the child's /proc/self/status) and recorded in the manifest; bad values are one
line and exit 2 before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from charllm_trace.collectors import cpu_alloc, cpu_quota
from charllm_trace.core.errors import UsageError
from tests.conftest import HAVE_TORCH, ROOT

SHOW = """import os, sys
lr = os.environ.get("LOCAL_RANK", "none")
line = [ln for ln in open("/proc/self/status") if ln.startswith("Cpus_allowed_list")][0]
open(os.path.join(sys.argv[1], "cpus-" + lr + ".txt"), "w").write(line.split()[1])
"""


def _cores(text: str) -> list[int]:
    """A kernel cpu list (``0-2,5``) -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in text.strip().split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def _collect(tmp: Path, cpus: str, *command: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "charllm_trace.cli.app", "collect", "--cpus", cpus, "--telemetry-hz", "0",
           "--cpu-hz", "0", "-o", str(tmp / "run"), "--", *command]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "two", "", str(len(os.sched_getaffinity(0)) + 1)])
def test_bad_cpus_one_line_exit_2_nothing_runs(spawn, tmp_path: Path, bad: str) -> None:
    marker = tmp_path / "ran"
    p = _collect(tmp_path, bad, sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "--cpus" in p.stderr
    assert "Traceback" not in p.stderr
    assert not marker.exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("bad", [0, -3, "x", "3.0"])
def test_parse_cpus_refuses(bad: object) -> None:
    with pytest.raises(UsageError):
        cpu_alloc.parse_cpus(bad)  # type: ignore[arg-type]


def test_plan_own_cores_when_they_fit_else_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_alloc, "available_cores", lambda: [2, 3, 5, 7])
    cmd = ["torchrun", "--nproc-per-node=2", "x.py"]
    a = cpu_alloc.plan(2, cmd)
    assert a["lists"] == [[2, 3], [5, 7]] and not a["shared"] and a["command_cores"] == [2, 3, 5, 7]
    b = cpu_alloc.plan(3, cmd)
    assert b["lists"] == [[2, 3, 5], [2, 3, 5]] and b["shared"] and b["command_cores"] == [2, 3, 5]
    c = cpu_alloc.plan(1, ["python", "x.py"])
    assert c["local_ranks"] == 1 and c["lists"] == [[2]]
    assert cpu_alloc.local_ranks(["torchrun", "--nproc_per_node", "4", "x.py"]) == 4


def test_single_process_runs_on_its_cores_and_manifest_says_so(spawn, tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text(SHOW)
    p = _collect(tmp_path, "1", sys.executable, str(tmp_path / "show.py"), str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert m["cpus"]["per_rank"] == 1 and len(m["cpus"]["lists"]) == 1
    assert _cores((tmp_path / "cpus-none.txt").read_text()) == m["cpus"]["lists"][0]
    # the quota: set where cgroup v2 lets the collector make one, else affinity only, said why
    q = m["cpus"]["quota"]
    own, why = cpu_quota.own_v2_dir()
    if own is None:  # this machine's case (cgroup v1 cpu controller): the fallback path
        assert q["set"] is False and "affinity only" in q["note"] and why in q["note"]
    else:
        assert q["set"] is True or "affinity only" in q["note"]
    assert "cgroup_cpu_max" in m  # recorded with --cpus (null where no cgroup cpu files are readable)
    assert not any(p.name.startswith("charllm-cpus-") for p in Path(own or "/nonexistent").glob("*"))


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="needs torch (torchrun)")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_each_rank_gets_its_own_core(spawn, tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text(SHOW)
    p = _collect(tmp_path, "1", sys.executable, "-m", "torch.distributed.run", "--standalone",
                 "--nproc_per_node", "2", str(tmp_path / "show.py"), str(tmp_path))  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    lists = m["cpus"]["lists"]
    assert len(lists) == 2 and not m["cpus"]["shared"] and set(lists[0]).isdisjoint(lists[1])
    for r in (0, 1):
        assert _cores((tmp_path / f"cpus-{r}.txt").read_text()) == lists[r]
