"""Run identity and run state: run ids, used run directories, processes alive or gone.

A collected run has a **run id**, written into ``manifest.json``, every ``node-<host>.json`` and
every ``rank-<N>.info.json`` (and, through the manifest, into the ETs ``convert`` writes). Every
node of a multi-node run must use the same one; it comes from, in order:

1. ``$CHARLLM_TRACE_RUN_ID`` (set it to the same value on every node);
2. Slurm: ``slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>`` (one ``srun`` step = one run);
3. torchrun's ``--rdzv-id`` / ``--rdzv_id`` in the command (unless ``none``);
4. otherwise node 0 makes a fresh one (``<UTC time>-<random>``) and any other node takes it from
   the ``running`` manifest node 0 wrote (waiting for it up to ``$CHARLLM_TRACE_RUN_ID_WAIT_S``
   seconds, default 60).

A **used** run directory is one holding anything that is not a file of this run while it is
running: a file of another run id, a file of the collector with no run id, a foreign file, or a
file of this run that says it has ended (a finished/failed/interrupted manifest, or this host's
node file in such a state). Every node checks, whatever its node rank.

Processes are identified by host, pid and start time (``/proc/<pid>/stat``), so a pid reused by
an unrelated process is not taken for a rank or a launcher. How a run ended, in words, is in
:mod:`charllm_trace.collectors.outcome`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENV_RUN_ID = "CHARLLM_TRACE_RUN_ID"
ENV_RUN_ID_WAIT = "CHARLLM_TRACE_RUN_ID_WAIT_S"
FINAL_STATES = ("finished", "failed", "interrupted")
_RUN_ID_OK = re.compile(r"^[A-Za-z0-9._:@+-]{1,128}$")
_RANK_FILE = re.compile(r"^rank-(\d+)\.(?:host_et\.json\.gz|kineto\.json\.gz|info\.json)$")
_HOST_FILE = re.compile(
    r"^(?:(?:telemetry|cpusched-cgroup|cpusched)-(.+)\.(?:csv|meta\.json|lock)|node-(.+)\.json)$"
)


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------


def proc_start(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    try:
        return int(stat.rsplit(b")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def proc_alive(pid: Any, start: Any = None) -> bool:
    """Is process ``pid`` (started at ``start``, if known) still there on this host?"""
    if not isinstance(pid, int) or pid <= 0:
        return False
    if os.path.isdir("/proc/self"):
        now = proc_start(pid)
        if now is None:
            return False
        try:  # a zombie has exited
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return False
        except (OSError, IndexError):
            return False
        return start is None or now == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def this_process() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": proc_start(pid)}


def stop_processes(procs: list[tuple[int, int | None]], grace_s: float = 5.0) -> list[int]:
    """SIGTERM the processes still alive (pid, start time on this host), SIGKILL them after
    ``grace_s``; return the pids that had to be stopped."""
    alive = [(p, s) for p, s in procs if proc_alive(p, s)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p, s in alive:
            if proc_alive(p, s):
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 2.0)
        while time.monotonic() < deadline and any(proc_alive(p, s) for p, s in alive):
            time.sleep(0.05)
    return [p for p, _ in alive]


# ---------------------------------------------------------------------------
# Run ids
# ---------------------------------------------------------------------------


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def shared_run_id(command: list[str]) -> str | None:
    """The run id every node derives alike (environment, Slurm, torchrun --rdzv-id), or None."""
    from charllm_trace.core.errors import UsageError

    v = os.environ.get(ENV_RUN_ID, "").strip()
    if v:
        if not _RUN_ID_OK.match(v):
            raise UsageError(f"${ENV_RUN_ID} {v!r}: use 1-128 letters, digits and . _ : @ + -")
        return v
    job = os.environ.get("SLURM_JOB_ID", "").strip()
    if job.isdigit():
        step = os.environ.get("SLURM_STEP_ID", "").strip()
        return f"slurm-{job}.{step}" if step.isdigit() else f"slurm-{job}"
    for i, a in enumerate(command):
        for opt in ("--rdzv-id", "--rdzv_id"):
            val = None
            if a == opt and i + 1 < len(command):
                val = command[i + 1]
            elif a.startswith(opt + "="):
                val = a.split("=", 1)[1]
            if val and val.lower() != "none" and _RUN_ID_OK.match(val):
                return f"rdzv-{val}"
    return None


def read_json(p: Path) -> dict[str, Any] | None:
    """The JSON object in ``p``, or None when it is missing, unreadable, not JSON or not a regular
    file (a FIFO is never opened blocking: the readers that need the file name the problem)."""
    from charllm_trace.core.errors import InputError
    from charllm_trace.core.files import read_regular

    try:
        d = json.loads(read_regular(p))
    except (InputError, ValueError, RecursionError):
        return None
    return d if isinstance(d, dict) else None


def launcher_gone(manifest: dict[str, Any]) -> bool | None:
    """For a ``running`` manifest: True if its launcher is known to be gone, False if it is alive,
    None if it ran on another host (cannot tell from here)."""
    la = manifest.get("launcher")
    if not isinstance(la, dict) or la.get("host") != socket.gethostname():
        return None
    return not proc_alive(la.get("pid"), la.get("start"))


def adopt_run_id(run_dir: Path, node_rank: int) -> str:
    """A node other than 0 with no shared run id: node 0's, from its ``running`` manifest."""
    from charllm_trace.core.errors import InputError

    try:
        wait = float(os.environ.get(ENV_RUN_ID_WAIT, "60"))
    except ValueError:
        wait = 60.0
    deadline = time.monotonic() + max(0.0, wait)
    mp = run_dir / "manifest.json"
    while True:
        m = read_json(mp)
        if m is not None:
            rid = m.get("run_id")
            if not isinstance(rid, str):
                raise InputError(mp, "used run directory: its manifest has no run id (another run's)")
            if m.get("status") != "running" or launcher_gone(m):
                raise InputError(
                    mp,
                    f"used run directory: run {rid} there has ended ({m.get('status')}); use another directory",
                )
            return rid
        if time.monotonic() >= deadline:
            raise InputError(
                run_dir,
                f"node rank {node_rank}: no run id to share with node 0 (no running manifest.json after "
                f"{wait:g} s): set ${ENV_RUN_ID} to the same value on every node, or start node 0 first",
            )
        time.sleep(0.2)


# ---------------------------------------------------------------------------
# Used run directories
# ---------------------------------------------------------------------------


def foreign_entries(run_dir: Path, run_id: str) -> list[tuple[str, str]]:
    """Entries of ``run_dir`` that are not files of run ``run_id`` while it runs: (name, why)."""
    j = _EntryJudge(run_dir, run_id)
    marked = [
        n for n in j.names if (n == "manifest.json" or n.startswith(("node-", "rank-"))) and ".tmp-" not in n
    ]
    j.mine = any(j.judge(n) is None for n in marked)
    out = []
    for n in j.names:
        why = j.judge(n)
        if why is not None:
            out.append((n, why))
    return out


class _EntryJudge:
    """Whether each entry of a run directory belongs to run ``run_id`` while it runs (its JSON
    headers read once each). ``mine``: whether the directory holds a marked file of this run
    (its temporary files are then taken as this run's)."""

    def __init__(self, run_dir: Path, run_id: str) -> None:
        self.run_dir, self.run_id = run_dir, run_id
        self.names = sorted(os.listdir(run_dir))
        self.docs: dict[str, dict[str, Any] | None] = {}
        self.mine = False

    def doc(self, name: str) -> dict[str, Any] | None:
        if name not in self.docs:
            self.docs[name] = read_json(self.run_dir / name)
        return self.docs[name]

    def judge(self, name: str) -> str | None:
        """None if ``name`` belongs to this running run, else why not."""
        if name == "manifest.json" or (name.startswith("node-") and name.endswith(".json")):
            return self._header(name)
        m = _RANK_FILE.match(name)
        if m:
            d = self.doc(f"rank-{m.group(1)}.info.json")
            rid = None if d is None else d.get("run_id")
            if rid == self.run_id:
                return None
            return f"a file of run {rid}" if rid else "a rank file of another collection (no run id)"
        m = _HOST_FILE.match(name)
        if m:
            tag = m.group(1) or m.group(2)
            owner = f"node-{tag}.json"
            if owner != name:
                return self.judge(owner) if owner in self.names else "a telemetry file of another collection"
        if name.startswith(".tmp-") or ".tmp-" in name:
            return None if self.mine else "an unfinished temporary file of another collection"
        return "not a file of this run"

    def _header(self, name: str) -> str | None:
        """The manifest or a node header: its run id and status."""
        d = self.doc(name)
        rid = None if d is None else d.get("run_id")
        if rid is None:
            return "a file of another collection (no run id)"
        if rid != self.run_id:
            return f"a file of run {rid}"
        status = d.get("status") if d else None
        if status in FINAL_STATES:
            return f"run {rid} has already ended here ({status})"
        if status == "running" and name == "manifest.json" and launcher_gone(d or {}):
            return f"run {rid} was interrupted here (its launcher is gone)"
        return None


# ---------------------------------------------------------------------------
# The launcher as a subreaper: descendants whose parent died become its children
# ---------------------------------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36


def set_subreaper(on: bool) -> bool:
    """Make this process adopt its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    if not os.path.isdir("/proc/self"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except Exception:
        return False


def children_of_self(exclude: set[int]) -> list[tuple[int, int | None]]:
    """(pid, start) of this process's living children, except ``exclude``."""
    return [
        (pid, int(fields[19]))
        for pid, fields in _child_stats(exclude)
        if len(fields) > 19 and fields[0] != b"Z"
    ]


def _child_stats(skip: set[int]) -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the /proc stat fields after the command name) of each child of this process, except
    ``skip`` (a process that ends while it is read is passed over)."""
    me = str(os.getpid()).encode()
    for e in os.scandir("/proc"):
        if not e.name.isdigit() or int(e.name) in skip:
            continue
        try:
            with open(f"/proc/{e.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == me:
            yield int(e.name), fields


def reap_children_except(keep: set[int]) -> None:
    """Collect the exit status of this process's ended children (no zombies left), except
    ``keep`` (children a ``subprocess.Popen`` will wait for itself)."""
    for pid, fields in _child_stats(keep):
        if fields[0] == b"Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
