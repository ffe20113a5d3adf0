"""The launcher's warden: makes a run end in a true state when the launcher itself is killed.

``charllm-trace collect`` starts this small process in a session of its own (so that a SIGKILL
of the launcher's process group does not reach it) and keeps a pipe to it open. The launcher
sends its setup as one JSON line, then the training command's pid, then ``{"done": true}``
once it has written the final manifest. If the pipe closes without ``done``, the launcher died
(SIGKILL, the OOM killer, a crash); the warden then

1. stops what the command left running on this host: the command's own process (if still
   there) and every rank process of this run that announced itself in ``rank-<N>.info.json``
   (SIGTERM, then SIGKILL after a grace period; pids checked against their start times);
2. deletes the half-written ``.tmp-<pid>-rank-*`` trace files of this host's dead ranks, the
   launcher's own half-written files and the host's telemetry lock file;
3. writes this node's ``node-<host>.json`` and, on node 0, ``manifest.json`` with
   ``status: interrupted`` and ``interrupted_by`` naming the launcher's death, plus the ranks'
   failures where they are known.

Run as ``python -m charllm_trace.collectors.warden`` (the launcher does this).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GRACE_S = 5.0
#: how long the warden tries the host's telemetry lock before leaving it (:func:`remove_lock`)
LOCK_WAIT_S = 3.0


def start_warden(setup: dict[str, Any]) -> subprocess.Popen[bytes] | None:
    """Start the warden and hand it ``setup``; None if it cannot be started (the run goes on)."""
    env = dict(os.environ)
    env.pop("CHARLLM_TRACE_CONFIG", None)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "charllm_trace.collectors.warden"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError:
        return None
    tell(proc, setup)
    return proc


def tell(proc: subprocess.Popen[bytes] | None, msg: dict[str, Any]) -> None:
    if proc is None or proc.stdin is None:
        return
    try:
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        proc.stdin.flush()
    except OSError:
        pass


def dismiss(proc: subprocess.Popen[bytes] | None) -> None:
    """The launcher finished normally: the warden exits without touching anything."""
    if proc is None:
        return
    tell(proc, {"done": True})
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()


def finish_interrupted(setup: dict[str, Any], child: tuple[int, int | None] | None) -> None:
    from charllm_trace.collectors.manifest import write_manifest, write_node_info
    from charllm_trace.collectors.outcome import (
        orphan_ranks,
        own_ranks,
        rank_failure,
        rank_infos,
        remove_rank_temporaries,
    )
    from charllm_trace.collectors.runstate import stop_processes

    rd = Path(setup["run_dir"])
    run_id = setup["run_id"]
    launcher = setup["launcher"]
    by = f"the launcher (pid {launcher['pid']} on {launcher['host']}) was killed"
    # The command and the ranks were asked to die with their parents (PR_SET_PDEATHSIG); give
    # them a moment, then stop what is left.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and orphan_ranks(rank_infos(rd, run_id), launcher["pid"]):
        time.sleep(0.05)
    infos = rank_infos(rd, run_id)
    stop_processes(([child] if child else []) + orphan_ranks(infos, launcher["pid"]), grace_s=GRACE_S)
    infos = rank_infos(rd, run_id)
    remove_rank_temporaries(rd, infos)
    failure = rank_failure(own_ranks(infos, launcher["pid"]))
    for p in (*rd.glob(f".tmp-{launcher['pid']}-*"), *rd.glob(f"*.tmp-{launcher['pid']}")):
        try:  # the launcher's own half-written manifest/node file, if it died while writing one
            p.unlink()
        except OSError:
            pass
    lock = setup.get("lock")
    if lock:
        remove_lock(lock)
    write_node_info(
        rd,
        command=setup["manifest_args"]["command"],
        node_rank=setup["manifest_args"]["node_rank"],
        run_id=run_id,
        status="interrupted",
        launcher=launcher,
        failure=failure,
    )
    if setup["manifest_args"]["node_rank"] == 0:
        write_manifest(
            rd,
            **setup["manifest_args"],
            exit_code=None,
            finished_ns=time.time_ns(),
            run_id=run_id,
            launcher=launcher,
            status="interrupted",
            interrupted_by=by,
            failure=failure,
        )


def remove_lock(lock: str, wait_s: float = LOCK_WAIT_S) -> bool:
    """Delete the host's telemetry lock file once no launcher holds it; True if deleted. Only
    launchers take it, and the dead one's hold ends as the kernel closes its files, in no set
    order with the pipe whose end woke the warden (once, on a loaded 2-core machine, a test
    found the lock left behind); so it is tried again for up to ``wait_s``; past that, another
    launcher on this host holds it: it stays."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(lock, "a+") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.remove(lock)
                return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        except OSError:
            return False


def main() -> int:
    setup: dict[str, Any] | None = None
    child: tuple[int, int | None] | None = None
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if setup is None:
            setup = msg
        elif msg.get("done"):
            return 0
        elif "child" in msg:
            child = (int(msg["child"]), msg.get("start"))
    if setup is None:
        return 0
    try:
        finish_interrupted(setup, child)
    except Exception as exc:  # nothing to report to: leave a trace for the user
        print(f"charllm-trace warden: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
