"""``collect --cpus N``'s cgroup CPU quota (issue 24): where the machine allows it, the command runs
in a cgroup v2 of its own whose ``cpu.max`` is N cores per local rank, besides the affinity
(``cpu_alloc``); everywhere else the affinity alone, and the manifest's ``cpus.quota`` says why.

"Allows" means: the collector's own cgroup is a cgroup v2 (``0::/path`` in ``/proc/self/cgroup``
and ``cgroup.controllers`` there), the ``cpu`` controller is enabled for its children
(``cgroup.subtree_control``, or can be enabled by writing ``+cpu``), and a child directory can be
made there (a delegated subtree, or root). The quota is ``cores × period`` µs per ``period`` (the
kernel default 100 000 µs), where cores = the union of the ranks' cores (every local rank is in
the one cgroup). The child cgroup is removed once the command has ended.

Also :func:`read_cpu_max`: the ``cpu.max`` of a cgroup directory (v2) or v1's
``cpu.cfs_quota_us``/``cpu.cfs_period_us``, recorded in the manifest (``cgroup_cpu_max``).
"""

from __future__ import annotations

import os
from typing import Any

#: the kernel's default CFS period, µs
PERIOD_US = 100_000
ROOT = "/sys/fs/cgroup"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def own_v2_dir(root: str = ROOT, proc_cgroup: str | None = None) -> tuple[str | None, str]:
    """(the collector's cgroup v2 directory, "") or (None, why there is none)."""
    text = proc_cgroup if proc_cgroup is not None else _read("/proc/self/cgroup")
    if text is None:
        return None, "no cgroup information (/proc/self/cgroup unreadable)"
    lines = text.split()
    v2 = [ln[3:] for ln in lines if ln.startswith("0::")]
    cpu_v1 = any(
        not ln.startswith("0::") and "cpu" in ln.split(":", 2)[1].split(",") for ln in lines if ":" in ln
    )
    if cpu_v1 or not v2:
        return None, "the cpu controller is in a cgroup v1 hierarchy here"
    d = os.path.join(root, v2[0].lstrip("/"))
    ctl = _read(os.path.join(d, "cgroup.controllers"))
    if ctl is None or "cpu" not in ctl.split():
        return None, f"the cgroup v2 {d} has no cpu controller"
    return d, ""


def _enable_cpu(d: str) -> str:
    """'' when the cpu controller is (or is now) enabled for ``d``'s children, else why not."""
    sub = _read(os.path.join(d, "cgroup.subtree_control")) or ""
    if "cpu" in sub.split():
        return ""
    try:
        with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
            f.write("+cpu")
    except OSError as exc:
        return f"cannot enable the cpu controller below {d} ({exc.strerror})"
    return ""


def prepare(cores: int, tag: str, root: str = ROOT, proc_cgroup: str | None = None) -> dict[str, Any]:
    """Make the command's cgroup with a quota of ``cores`` cores: ``{"set": True, "cgroup": dir,
    "quota_us", "period_us"}``, or ``{"set": False, "note": why, affinity only}``."""
    d, why = own_v2_dir(root, proc_cgroup)
    if d is None:
        return {"set": False, "note": f"{why}: no cgroup cpu.max quota set; affinity only"}
    why = _enable_cpu(d)
    child = os.path.join(d, f"charllm-cpus-{tag}")
    if not why:
        try:
            os.mkdir(child)
            with open(os.path.join(child, "cpu.max"), "w") as f:
                f.write(f"{cores * PERIOD_US} {PERIOD_US}")
        except OSError as exc:
            why = f"cannot make a cgroup with a cpu.max quota in {d} ({exc.strerror})"
            _remove(child)
    if why:
        return {"set": False, "note": f"{why}: affinity only"}
    return {"set": True, "cgroup": child, "quota_us": cores * PERIOD_US, "period_us": PERIOD_US}


def join(quota: dict[str, Any]) -> None:
    """Move the calling process into the quota's cgroup (in the command's ``preexec_fn``)."""
    if quota.get("set"):
        with open(os.path.join(quota["cgroup"], "cgroup.procs"), "w") as f:
            f.write("0")


def _remove(d: str) -> None:
    try:
        os.rmdir(d)
    except OSError:
        pass


def remove(quota: dict[str, Any] | None) -> None:
    """Remove the quota's cgroup (the command has ended; an error leaves it, harmlessly empty)."""
    if quota and quota.get("set"):
        _remove(quota["cgroup"])


def read_cpu_max(d: str | None) -> dict[str, Any] | None:
    """``{"cgroup", "quota_us" (None: no limit), "period_us"}`` of the cgroup directory ``d``."""
    if d is None:
        return None
    mx = _read(os.path.join(d, "cpu.max"))
    if mx is not None:
        quota, period = (mx.split() + ["", ""])[:2]
    else:
        quota = (_read(os.path.join(d, "cpu.cfs_quota_us")) or "").strip()
        period = (_read(os.path.join(d, "cpu.cfs_period_us")) or "").strip()
    if not period.isdigit():
        return None
    q = int(quota) if quota.lstrip("-").isdigit() and int(quota) > 0 else None
    return {"cgroup": d, "quota_us": q, "period_us": int(period)}
