"""CPU scheduler telemetry (issue 24): the scheduler state of every thread of the traced command's
processes, and its cgroup's CPU throttling, sampled during ``collect`` on the trace's clock.

Run as ``python -m charllm_trace.collectors.cpu_sched RUN_DIR ROOT_PID HZ`` by the launcher (a
process of its own: the ranks are measured, not slowed by a sampling thread of theirs). Standard
library only. Per node, in the run directory (docs/collect.md, "CPU scheduler telemetry"):

- ``cpusched-<host>.csv``: one row per thread per sample, columns :data:`COLUMNS`; counters are
  cumulative since the thread started (``utime``/``stime`` in clock ticks, ``run_ns``/``wait_ns``
  from ``/proc/<pid>/task/<tid>/schedstat``: time on a CPU, and time runnable waiting for one);
- ``cpusched-cgroup-<host>.csv``: the command's cgroup ``cpu.stat`` (``nr_periods``,
  ``nr_throttled``, ``throttled_usec``) and ``cpu.max`` per sample;
- ``cpusched-<host>.meta.json``: rate, clock ticks per second, the cgroup and its ``cpu_max``
  (quota and period, µs, at the start; null quota: no limit), and notes (a file the
  kernel does not provide, e.g. schedstat without ``CONFIG_SCHED_INFO``: its columns stay empty).

Rows are appended and flushed at least every 0.25 s, so a killed sampler loses at most that much;
a last line cut short is ignored by the reader. Times are ``time.time_ns()`` (Unix epoch ns).
The process tree is rescanned every second (ranks started by torchrun appear a little later).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from charllm_trace.collectors.cpu_quota import read_cpu_max

COLUMNS = ("time_ns", "pid", "tid", "comm", "state", "utime_ticks", "stime_ticks", "run_ns", "wait_ns",
           "slices", "vol_cs", "invol_cs")  # fmt: skip
CGROUP_COLUMNS = ("time_ns", "nr_periods", "nr_throttled", "throttled_usec", "quota_us", "period_us")
FLUSH_S = 0.25
RESCAN_S = 1.0


def paths(run_dir: str, host: str) -> dict[str, str]:
    base = os.path.join(run_dir, f"cpusched-{host}")
    return {"threads": base + ".csv", "cgroup": os.path.join(run_dir, f"cpusched-cgroup-{host}.csv"),
            "meta": base + ".meta.json"}  # fmt: skip


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from ``/proc/*/stat``'s parent ids)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def thread_row(pid: int, tid: int, now: int, missing: set[str]) -> list[str] | None:
    """One CSV row of thread ``tid`` (None when it has ended)."""
    base = f"/proc/{pid}/task/{tid}"
    stat = _read(base + "/stat")
    if stat is None:
        return None
    head, _, rest = stat.rpartition(b")")
    comm = head.split(b"(", 1)[-1].decode("utf-8", "replace").replace(",", "_")
    f = rest.split()
    sched = _read(base + "/schedstat")
    if sched is None:
        missing.add("schedstat")
        run = wait = slices = ""
    else:
        run, wait, slices = (x.decode() for x in sched.split()[:3])
    vol = invol = ""
    status = _read(base + "/status")
    for line in (status or b"").splitlines():
        if line.startswith(b"voluntary_ctxt_switches:"):
            vol = line.split()[1].decode()
        elif line.startswith(b"nonvoluntary_ctxt_switches:"):
            invol = line.split()[1].decode()
    return [str(now), str(pid), str(tid), comm, f[0].decode(), f[11].decode(), f[12].decode(), run, wait, slices,
            vol, invol]  # fmt: skip


def cgroup_dir(pid: int) -> str | None:
    """The cgroup directory of ``pid`` holding ``cpu.stat``: v2 (``/sys/fs/cgroup`` + its path),
    else v1's ``cpu`` controller (``/sys/fs/cgroup/cpu`` + its path); None without one."""
    raw = (_read(f"/proc/{pid}/cgroup") or b"").decode()
    for line in raw.splitlines():
        hid, ctl, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and ctl == "":
            d = "/sys/fs/cgroup" + path.strip()
        elif "cpu" in ctl.split(","):
            d = "/sys/fs/cgroup/cpu" + path.strip()
        else:
            continue
        if os.path.exists(os.path.join(d, "cpu.stat")):
            return d
    return None


def cgroup_row(d: str, now: int) -> list[str] | None:
    """cpu.stat and the quota (v2 ``cpu.max``; v1 ``throttled_time`` ns, ``cpu.cfs_quota_us``)."""
    stat = _read(os.path.join(d, "cpu.stat"))
    if stat is None:
        return None
    kv = dict(line.split()[:2] for line in stat.decode().splitlines() if len(line.split()) >= 2)
    thr = kv.get("throttled_usec", str(int(kv["throttled_time"]) // 1000) if "throttled_time" in kv else "")
    mx = _read(os.path.join(d, "cpu.max"))
    if mx is not None:
        quota, period = (mx.decode().split() + ["", ""])[:2]
    else:
        quota = (_read(os.path.join(d, "cpu.cfs_quota_us")) or b"").decode().strip()
        period = (_read(os.path.join(d, "cpu.cfs_period_us")) or b"").decode().strip()
    quota = "" if quota in ("max", "-1") else quota
    return [str(now), kv.get("nr_periods", ""), kv.get("nr_throttled", ""), thr, quota, period]


def run(run_dir: str, root: int, hz: float, host: str) -> None:
    p = paths(run_dir, host)
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    cg = cgroup_dir(root)
    missing: set[str] = set()
    meta = {"format": "charllm-cpusched-csv", "version": 1, "root_pid": root, "rate_hz": hz,
            "clock_ticks_per_s": os.sysconf("SC_CLK_TCK"), "cgroup": cg, "columns": list(COLUMNS),
            "cgroup_columns": list(CGROUP_COLUMNS), "cpu_max": read_cpu_max(cg), "notes": []}  # fmt: skip
    if cg is None:
        meta["notes"].append("no cgroup v2 cpu.stat for the command: no throttling figures")
    with open(p["threads"], "w") as out, open(p["cgroup"], "w") as cout:
        out.write(",".join(COLUMNS) + "\n")
        cout.write(",".join(CGROUP_COLUMNS) + "\n")
        pids: list[int] = []
        last_scan = last_flush = 0.0
        period = 1.0 / hz
        while not stop:
            t = time.monotonic()
            if t - last_scan >= RESCAN_S:
                pids, last_scan = descendants(root), t
            now = time.time_ns()
            alive = False
            for pid in pids:
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                alive = True
                for tid in tids:
                    row = thread_row(pid, int(tid), now, missing)
                    if row is not None:
                        out.write(",".join(row) + "\n")
            c = cgroup_row(cg, now) if cg else None
            if c is not None:
                cout.write(",".join(c) + "\n")
            if t - last_flush >= FLUSH_S:
                out.flush()
                cout.flush()
                last_flush = t
            if not alive and not os.path.exists(f"/proc/{root}"):
                break
            time.sleep(max(0.0, period - (time.monotonic() - t)))
    if "schedstat" in missing:
        meta["notes"].append(
            "no /proc/<pid>/task/<tid>/schedstat (kernel without CONFIG_SCHED_INFO): no run/wait times"
        )
    tmp = f"{p['meta']}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(tmp, p["meta"])


def start(run_dir: str, root: int, hz: float, host: str) -> object:
    """The sampler as a child process of the caller (the launcher), until :func:`stop`."""
    import subprocess

    cmd = [sys.executable, "-m", "charllm_trace.collectors.cpu_sched", run_dir, str(root), str(hz), host]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL)


def stop(proc: object) -> None:
    proc.terminate()  # type: ignore[attr-defined]
    try:
        proc.wait(timeout=5)  # type: ignore[attr-defined]
    except Exception:
        proc.kill()  # type: ignore[attr-defined]


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
