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
an unrelated process is not taken for a rank or a launcher.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import time
from pathlib import Path
from typing import Any

ENV_RUN_ID = "CHARLLM_TRACE_RUN_ID"
ENV_RUN_ID_WAIT = "CHARLLM_TRACE_RUN_ID_WAIT_S"
FINAL_STATES = ("finished", "failed", "interrupted")
_RUN_ID_OK = re.compile(r"^[A-Za-z0-9._:@+-]{1,128}$")
_RANK_FILE = re.compile(r"^rank-(\d+)\.(?:host_et\.json\.gz|kineto\.json\.gz|info\.json)$")
_HOST_FILE = re.compile(r"^(?:telemetry-(.+)\.(?:csv|meta\.json|lock)|node-(.+)\.json)$")


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
    from charllm_trace.errors import UsageError

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


def _read_json(p: Path) -> dict[str, Any] | None:
    try:
        with open(p) as f:
            d = json.load(f)
    except (OSError, ValueError):
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
    from charllm_trace.errors import InputError

    try:
        wait = float(os.environ.get(ENV_RUN_ID_WAIT, "60"))
    except ValueError:
        wait = 60.0
    deadline = time.monotonic() + max(0.0, wait)
    mp = run_dir / "manifest.json"
    while True:
        m = _read_json(mp)
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
    names = sorted(os.listdir(run_dir))
    docs: dict[str, dict[str, Any] | None] = {}

    def doc(name: str) -> dict[str, Any] | None:
        if name not in docs:
            docs[name] = _read_json(run_dir / name)
        return docs[name]

    def judge(name: str) -> str | None:
        """None if ``name`` belongs to this running run, else why not."""
        if name == "manifest.json" or (name.startswith("node-") and name.endswith(".json")):
            d = doc(name)
            rid = None if d is None else d.get("run_id")
            if rid is None:
                return "a file of another collection (no run id)"
            if rid != run_id:
                return f"a file of run {rid}"
            status = d.get("status") if d else None
            if status in FINAL_STATES:
                return f"run {rid} has already ended here ({status})"
            if status == "running" and name == "manifest.json" and launcher_gone(d or {}):
                return f"run {rid} was interrupted here (its launcher is gone)"
            return None
        m = _RANK_FILE.match(name)
        if m:
            d = doc(f"rank-{m.group(1)}.info.json")
            rid = None if d is None else d.get("run_id")
            if rid == run_id:
                return None
            return f"a file of run {rid}" if rid else "a rank file of another collection (no run id)"
        m = _HOST_FILE.match(name)
        if m:
            tag = m.group(1) or m.group(2)
            owner = f"node-{tag}.json"
            if owner != name:
                why = judge(owner) if owner in names else "a telemetry file of another collection"
                return why
        if name.startswith(".tmp-") or ".tmp-" in name:
            return None if mine else "an unfinished temporary file of another collection"
        return "not a file of this run"

    marked = [
        n for n in names if (n == "manifest.json" or n.startswith(("node-", "rank-"))) and ".tmp-" not in n
    ]
    mine = any(judge(n) is None for n in marked)
    out = []
    for n in names:
        why = judge(n)
        if why is not None:
            out.append((n, why))
    return out


# ---------------------------------------------------------------------------
# What a run directory says about how the run ended (for readers)
# ---------------------------------------------------------------------------


def _utc(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ns / 1e9))


def last_activity_ns(run_dir: Path) -> int | None:
    """The newest modification time of the run's files (when it was last seen doing anything)."""
    best = None
    for e in os.scandir(run_dir):
        try:
            t = e.stat(follow_symlinks=False).st_mtime_ns
        except OSError:
            continue
        best = t if best is None else max(best, t)
    return best


def interruption(run_dir: Path, manifest: dict[str, Any]) -> str | None:
    """``this run was interrupted at ...`` for a run that did not end normally, else None.

    A manifest says ``interrupted`` (the collector saw it), or still says ``running`` while its
    launcher is gone (killed so hard that nothing could finish the manifest)."""
    status = manifest.get("status")
    if status == "interrupted":
        when = manifest.get("finished_ns")
        how = manifest.get("interrupted_by") or "interrupted"
        at = f" at {_utc(when)}" if isinstance(when, int) else ""
        return f"this run was interrupted{at} ({how})"
    if status == "running":
        gone = launcher_gone(manifest)
        if gone is False:
            return "this run is still being collected (its launcher is running)"
        last = last_activity_ns(run_dir)
        at = f" at {_utc(last)} (its last file change)" if last else ""
        if gone:
            return f"this run was interrupted{at}: its launcher died without finishing the manifest"
        la = manifest.get("launcher") or {}
        return (
            f"this run was interrupted{at} or is still running on {la.get('host', 'another host')}: "
            "the manifest still says running"
        )
    if status == "failed" and manifest.get("failure"):
        return f"this run failed: {manifest['failure']}"
    return None


# ---------------------------------------------------------------------------
# How the ranks ended (from their info files)
# ---------------------------------------------------------------------------


def rank_infos(run_dir: Path, run_id: str | None) -> list[dict[str, Any]]:
    """The ``rank-<N>.info.json`` of run ``run_id`` (all of them if ``run_id`` is None)."""
    out = []
    for p in sorted(run_dir.glob("rank-*.info.json")):
        d = _read_json(p)
        if d is not None and isinstance(d.get("rank"), int) and (run_id is None or d.get("run_id") == run_id):
            out.append(d)
    return sorted(out, key=lambda d: d["rank"])


def rank_ending(info: dict[str, Any]) -> str | None:
    """How a rank process ended, in words; None for a normal exit."""
    ended = info.get("ended")
    where = f"pid {info.get('pid')} on {info.get('hostname')}"
    steps = info.get("steps_completed")
    after = f" after {steps} optimizer steps" if isinstance(steps, int) else ""
    if isinstance(ended, dict):
        if ended.get("how") == "signal":
            return f"rank {info['rank']} ({where}) was stopped by {ended.get('signal')}{after}"
        if ended.get("how") == "exception":
            error = " ".join(str(ended.get("error")).split())
            error = error if len(error) <= 200 else error[:199] + "…"
            return f"rank {info['rank']} ({where}) raised {error}{after}"
        return None
    if info.get("hostname") == socket.gethostname() and proc_alive(info.get("pid"), info.get("pid_start")):
        return f"rank {info['rank']} ({where}) is still running"
    # The info file was last written when the trace ended (or at start): a lower bound.
    after = f" after at least {steps} optimizer steps" if isinstance(steps, int) and steps > 0 else ""
    return (
        f"rank {info['rank']} ({where}) died without exiting{after} "
        "(killed by SIGKILL, e.g. the OOM killer, or crashed)"
    )


def rank_failure(infos: list[dict[str, Any]]) -> str | None:
    """Which ranks failed and how, the likely first cause first (a rank that died or raised comes
    before ranks stopped by a signal, which launchers send to the others after a failure)."""
    endings = [(i, rank_ending(i)) for i in infos]
    bad = [(i, e) for i, e in endings if e is not None]
    if not bad:
        return None
    order = {"died": 0, "raised": 1, "stopped": 2, "is still": 3}

    def key(item: tuple[dict[str, Any], str]) -> tuple[int, int]:
        text = item[1]
        k = min((v for w, v in order.items() if w in text), default=4)
        return k, item[0]["rank"]

    bad.sort(key=key)
    text = "; ".join(e for _, e in bad[:4])
    return text + (f"; and {len(bad) - 4} more ranks" if len(bad) > 4 else "")


def orphan_ranks(
    infos: list[dict[str, Any]], launcher_pid: int | None = None
) -> list[tuple[int, int | None]]:
    """(pid, start) of this host's rank processes that are still alive (of the launcher
    ``launcher_pid`` only, if given: several launchers of one run may share a host)."""
    host = socket.gethostname()
    return [
        (i["pid"], i.get("pid_start"))
        for i in infos
        if i.get("hostname") == host
        and (launcher_pid is None or i.get("launcher_pid") == launcher_pid)
        and proc_alive(i.get("pid"), i.get("pid_start"))
    ]


def remove_rank_temporaries(run_dir: Path, infos: list[dict[str, Any]]) -> list[str]:
    """Delete the half-written ``.tmp-<pid>-rank-*`` files of this host's ranks that are gone."""
    host = socket.gethostname()
    dead = {
        i.get("pid")
        for i in infos
        if i.get("hostname") == host and not proc_alive(i.get("pid"), i.get("pid_start"))
    }
    removed = []
    for p in run_dir.glob(".tmp-*-rank-*"):
        pid = p.name.split("-", 2)[1]
        if pid.isdigit() and int(pid) in dead:
            try:
                p.unlink()
                removed.append(p.name)
            except OSError:
                pass
    return removed


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
    me = str(os.getpid()).encode()
    out = []
    for e in os.scandir("/proc"):
        if not e.name.isdigit() or int(e.name) in exclude:
            continue
        try:
            with open(f"/proc/{e.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 19 and fields[1] == me and fields[0] != b"Z":
            out.append((int(e.name), int(fields[19])))
    return out


def reap_children_except(keep: set[int]) -> None:
    """Collect the exit status of this process's ended children (no zombies left), except
    ``keep`` (children a ``subprocess.Popen`` will wait for itself)."""
    me = str(os.getpid()).encode()
    for e in os.scandir("/proc"):
        if not e.name.isdigit() or int(e.name) in keep:
            continue
        try:
            with open(f"/proc/{e.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == me and fields[0] == b"Z":
            try:
                os.waitpid(int(e.name), os.WNOHANG)
            except ChildProcessError:
                pass


# ---------------------------------------------------------------------------
# For readers of run directories (converters/run_dir.py)
# ---------------------------------------------------------------------------


def check_one_run(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Raise InputError if the run's manifest, node files and rank info files carry different
    run ids (files of two runs in one directory). Files without a run id (older collections,
    other tools) are not judged."""
    from charllm_trace.errors import InputError

    seen: dict[str, str] = {}
    if isinstance(manifest.get("run_id"), str):
        seen[manifest["run_id"]] = "manifest.json"
    for pat in ("node-*.json", "rank-*.info.json"):
        for p in sorted(run_dir.glob(pat)):
            d = _read_json(p)
            rid = None if d is None else d.get("run_id")
            if isinstance(rid, str) and rid not in seen:
                seen[rid] = p.name
    if len(seen) > 1:
        (a, fa), (b, fb) = list(seen.items())[:2]
        raise InputError(run_dir, f"mixes two runs: {fa} has run id {a!r} but {fb} has {b!r}")


def hidden_temporaries(run_dir: Path) -> list[str]:
    """Half-written files (``.tmp-…``, a writer stopped before renaming them): never read."""
    return sorted(e.name for e in os.scandir(run_dir) if e.name.startswith(".") and ".tmp-" in e.name)


def reader_note(
    run_dir: Path, manifest: dict[str, Any], usable: list[int], partial: list[int] | None = None
) -> str | None:
    """One line for a reader of a run that did not end normally (or holds half-written files):
    what happened and what is usable; None for a run that finished cleanly."""
    what = interruption(run_dir, manifest) if manifest else None
    temps = hidden_temporaries(run_dir)
    if what is None and not temps:
        return None
    parts = [what] if what else []
    expected = sorted(
        {int(r) for r in (manifest.get("steps") or {}).get("traced", {}) if str(r).isdigit()}
        | {i["rank"] for i in rank_infos(run_dir, None)}
    )
    missing = [r for r in expected if r not in usable]
    half = [r for r in (partial or []) if r in usable]
    whole = [r for r in usable if r not in half]
    parts.append(
        f"usable: rank(s) {_ranges(whole)} (host ET and Kineto profile)"
        + (f", rank(s) {_ranges(half)} (one of the two)" if half else "")
        + (f"; rank(s) {_ranges(missing)} left no trace" if missing else "")
    )
    if temps:
        parts.append(
            f"ignored {len(temps)} half-written file(s) ({temps[0]}{', ...' if len(temps) > 1 else ''})"
        )
    return "; ".join(parts)


def _ranges(ranks: list[int]) -> str:
    out: list[str] = []
    for r in sorted(ranks):
        if out and r == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out) if out else "none"
