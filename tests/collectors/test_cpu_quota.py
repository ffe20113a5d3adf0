"""The cgroup CPU quota of ``collect --cpus`` (collectors/cpu_quota.py) on a fake cgroup tree: set
where cgroup v2 with a cpu controller allows a child cgroup, the fallback (affinity only, with the
reason) everywhere else; ``read_cpu_max`` of v2 and v1 files."""

from __future__ import annotations

from pathlib import Path

from charllm_trace.collectors import cpu_quota

V1 = "9:name=systemd:/\n2:cpuacct:/\n1:cpu:/\n0::/\n"  # this machine's kind: cpu under cgroup v1


def _v2(root: Path, sub: str = "cpu") -> Path:
    d = root / "job"
    d.mkdir()
    (d / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (d / "cgroup.subtree_control").write_text(sub + "\n")
    return d


def test_v1_hierarchy_falls_back_to_affinity_with_the_reason(tmp_path: Path) -> None:
    q = cpu_quota.prepare(2, "t", root=str(tmp_path), proc_cgroup=V1)
    assert q == {"set": False, "note": "the cpu controller is in a cgroup v1 hierarchy here: "
                 "no cgroup cpu.max quota set; affinity only"}  # fmt: skip
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_v2_without_cpu_controller_falls_back(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    (d / "cgroup.controllers").write_text("memory pids\n")
    q = cpu_quota.prepare(1, "t", root=str(tmp_path), proc_cgroup="0::/job\n")
    assert q["set"] is False and "no cpu controller" in q["note"] and "affinity only" in q["note"]


def test_v2_with_cpu_controller_gets_a_quota_of_its_cores(tmp_path: Path) -> None:
    d = _v2(tmp_path)
    q = cpu_quota.prepare(3, "42", root=str(tmp_path), proc_cgroup="0::/job\n")
    child = d / "charllm-cpus-42"
    assert q == {"set": True, "cgroup": str(child), "quota_us": 300_000, "period_us": 100_000}
    assert (child / "cpu.max").read_text() == "300000 100000"
    assert cpu_quota.read_cpu_max(str(child)) == {
        "cgroup": str(child),
        "quota_us": 300_000,
        "period_us": 100_000,
    }
    (child / "cpu.max").unlink()  # a real cgroup's files vanish with it; here rmdir needs it empty
    cpu_quota.remove(q)
    assert not child.exists()


def test_v2_enabling_the_controller_is_tried(tmp_path: Path) -> None:
    d = _v2(tmp_path, sub="")
    q = cpu_quota.prepare(1, "7", root=str(tmp_path), proc_cgroup="0::/job\n")
    assert q["set"] is True and (d / "cgroup.subtree_control").read_text() == "+cpu"


def test_v2_unwritable_falls_back(tmp_path: Path) -> None:
    _v2(tmp_path)
    q = cpu_quota.prepare(1, "7", root=str(tmp_path / "missing"), proc_cgroup="0::/job\n")
    assert q["set"] is False and "affinity only" in q["note"]


def test_read_cpu_max_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_quota.read_cpu_max(str(tmp_path)) == {
        "cgroup": str(tmp_path),
        "quota_us": None,
        "period_us": 100000,
    }
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota.read_cpu_max(str(v1)) == {"cgroup": str(v1), "quota_us": 50000, "period_us": 100000}
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_quota.read_cpu_max(str(v1))["quota_us"] is None
    assert cpu_quota.read_cpu_max(None) is None and cpu_quota.read_cpu_max(str(tmp_path / "none")) is None
