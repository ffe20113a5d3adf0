"""Collector runs that end badly or share a directory (issue 15 items 3 and 7), with fake
training commands (plain Python processes, no torch): used run directories refused on every node
whatever the rank variables, a multi-node run sharing one directory, a failed rank named with how
it died, a SIGKILLed launcher (manifest finished by the warden, no orphaned ranks), leftover rank
processes stopped, half-written temporaries removed, a run id in every file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from charllm_trace.collectors.runstate import proc_alive

NODE_VARS = ("NODE_RANK", "GROUP_RANK", "SLURM_NODEID", "OMPI_COMM_WORLD_NODE_RANK")
RUN_ID_VARS = ("CHARLLM_TRACE_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", *NODE_VARS)

# A stand-in for torchrun: starts N "ranks" (Python processes with RANK set, each in a session of
# its own as torchrun does), waits for them; when one fails it SIGTERMs the others and exits 1.
FAKE_TORCHRUN = r"""
import os, signal, subprocess, sys, time
n, rank_code = int(sys.argv[1]), sys.argv[2]
procs = []
for r in range(n):
    rank = r + int(os.environ.get("FAKE_RANK_BASE", "0"))
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(r))
    procs.append(subprocess.Popen([sys.executable, "-c", rank_code], env=env, start_new_session=True))
if os.environ.get("FAKE_EXIT_AT_ONCE"):  # leave the ranks behind once they have started
    while not all(os.path.exists(os.path.join(os.environ["RUN"], f"rank-{r}.info.json")) for r in range(n)):
        time.sleep(0.02)
    time.sleep(0.2)
    sys.exit(0)
failed = None
while failed is None and any(p.poll() is None for p in procs):
    for p in procs:
        if p.poll() not in (None, 0):
            failed = p
    time.sleep(0.05)
if failed is not None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        p.wait()
    sys.exit(1)
sys.exit(max(p.returncode != 0 for p in procs))
"""


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in RUN_ID_VARS}
    e.update(extra)
    return e


def collect_argv(run: Path, *command: str, opts: tuple[str, ...] = ("--telemetry-hz", "0")) -> list[str]:
    """``charllm-trace collect -o RUN OPTS -- COMMAND`` in this interpreter."""
    return [sys.executable, "-m", "charllm_trace.cli.app", "collect", "-o", str(run), *opts, "--", *command]


def collect(
    run: Path, *command: str, extra_env: dict[str, str] | None = None, opts: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        collect_argv(run, *command, opts=("--telemetry-hz", "0", *opts)),
        capture_output=True,
        text=True,
        timeout=120,
        env=env(**(extra_env or {})),
    )


def start_collect(
    run: Path, *command: str, extra_env: dict[str, str], **popen: object
) -> subprocess.Popen[str]:
    """``collect`` started in the background, its stderr piped (for a test's ``held`` list)."""
    return subprocess.Popen(
        collect_argv(run, *command), stderr=subprocess.PIPE, text=True, env=env(**extra_env), **popen
    )


def fake_torchrun(n: int, rank_code: str) -> list[str]:
    return [sys.executable, "-c", FAKE_TORCHRUN, str(n), rank_code]


def snapshot(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run.iterdir()}


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def last_line(p: subprocess.CompletedProcess[str]) -> str:
    return p.stderr.strip().splitlines()[-1]


@pytest.fixture
def held(spawn, tmp_path: Path):
    """Launchers a test starts in the background, their ranks held until ``tmp_path/go`` exists;
    released and ended at teardown even when the test failed half-way."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    (tmp_path / "go").touch()
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()  # the launcher's warden then stops its command and ranks
            p.wait(30)


def wait_for(cond, timeout: float = 30.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------------------
# Used run directories (item 3)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("var", NODE_VARS)
def test_second_collect_refused_whatever_the_node_rank(spawn, tmp_path: Path, var: str) -> None:
    run = tmp_path / "run"
    p = collect(run, *fake_torchrun(2, "pass"))
    assert p.returncode == 0, p.stderr
    before = snapshot(run)
    assert {"manifest.json", "rank-0.info.json", "rank-1.info.json"} <= set(before)
    rid = manifest(run)["run_id"]
    # A second run as node 1 (no shared run id: it would take node 0's, but that run has ended).
    p = collect(run, *fake_torchrun(2, "pass"), extra_env={var: "1"})
    assert p.returncode == 2
    assert last_line(p) == (
        f"error: {run / 'manifest.json'}: used run directory: run {rid} there has ended (finished); "
        "use another directory"
    )
    assert snapshot(run) == before  # nothing overwritten, nothing added
    # With run ids of their own (another run, or this one again): refused as well.
    for rid2, why in (
        ("other-run", f"a file of run {rid}"),
        (rid, f"run {rid} has already ended here (finished)"),
    ):
        p = collect(run, *fake_torchrun(2, "pass"), extra_env={var: "1", "CHARLLM_TRACE_RUN_ID": rid2})
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "used run directory:" in p.stderr and why in p.stderr, p.stderr
        assert snapshot(run) == before


def test_force_replaces_only_the_collectors_files_of_other_runs(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert collect(run, *fake_torchrun(1, "pass")).returncode == 0
    old = manifest(run)["run_id"]
    (run / "notes.txt").write_text("mine")
    p = collect(
        run,
        *fake_torchrun(1, "pass"),
        extra_env={"NODE_RANK": "1", "CHARLLM_TRACE_RUN_ID": "new"},
        opts=("--force",),
    )
    assert p.returncode == 0, p.stderr
    assert (run / "notes.txt").read_text() == "mine"
    assert json.loads((run / "rank-0.info.json").read_text())["run_id"] == "new"
    assert not (run / "manifest.json").exists()  # node 1 writes no manifest; the old one is gone
    assert old != "new"


def test_multi_node_run_shares_one_directory(tmp_path: Path, held: list) -> None:
    run = tmp_path / "run"
    go = tmp_path / "go"
    # The first node's rank runs until the second node's launcher has ended (any load).
    rank_code = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"
    # Node 0 makes the run id; node 1 (started while node 0 runs) takes it from the manifest.
    n0 = start_collect(run, *fake_torchrun(1, rank_code), extra_env=dict(NODE_RANK="0"))
    held.append(n0)
    assert wait_for(lambda: (run / "manifest.json").exists())
    p1 = collect(run, *fake_torchrun(1, "pass"), extra_env={"NODE_RANK": "1", "FAKE_RANK_BASE": "1"})
    go.touch()
    assert n0.wait(60) == 0 and p1.returncode == 0, (n0.stderr.read(), p1.stderr)
    m = manifest(run)
    (node,) = run.glob("node-*.json")  # one host here: both launchers write the same node file
    assert json.loads(node.read_text())["run_id"] == m["run_id"]
    for r in range(2):
        assert json.loads((run / f"rank-{r}.info.json").read_text())["run_id"] == m["run_id"]
    # With a shared run id, node 1 may start first.
    go.unlink()
    run2 = tmp_path / "run2"
    n1 = start_collect(
        run2,
        *fake_torchrun(1, rank_code),
        extra_env=dict(NODE_RANK="1", CHARLLM_TRACE_RUN_ID="job-42", FAKE_RANK_BASE="1"),
    )
    held.append(n1)
    assert wait_for(lambda: any(run2.glob("node-*.json")))
    p0 = collect(
        run2, *fake_torchrun(1, "pass"), extra_env={"NODE_RANK": "0", "CHARLLM_TRACE_RUN_ID": "job-42"}
    )
    go.touch()
    assert n1.wait(60) == 0 and p0.returncode == 0, (n1.stderr.read(), p0.stderr)
    assert manifest(run2)["run_id"] == "job-42" and manifest(run2)["status"] == "finished"


def test_launchers_sharing_a_host_leave_each_others_ranks_alone(tmp_path: Path, held: list) -> None:
    # One run, two launchers on one host (srun with one task per GPU): the first to finish must
    # not stop the other's ranks as leftovers.
    run = tmp_path / "run"
    slow = start_collect(
        run,
        *fake_torchrun(
            1, f"import os, time\nwhile not os.path.exists({str(tmp_path / 'go')!r}): time.sleep(0.05)"
        ),
        extra_env=dict(NODE_RANK="1", CHARLLM_TRACE_RUN_ID="job-7", FAKE_RANK_BASE="1"),
    )
    held.append(slow)
    assert wait_for(lambda: (run / "rank-1.info.json").exists())
    fast = collect(
        run, *fake_torchrun(1, "pass"), extra_env={"NODE_RANK": "0", "CHARLLM_TRACE_RUN_ID": "job-7"}
    )
    assert fast.returncode == 0 and "stopped" not in fast.stderr, fast.stderr
    (tmp_path / "go").touch()
    assert slow.wait(60) == 0, slow.stderr.read()
    assert json.loads((run / "rank-1.info.json").read_text())["ended"] == {"how": "exit"}


def test_node_without_a_run_id_to_share(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    p = collect(run, "true", extra_env={"NODE_RANK": "2", "CHARLLM_TRACE_RUN_ID_WAIT_S": "0.3"})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "node rank 2: no run id to share with node 0" in p.stderr and "CHARLLM_TRACE_RUN_ID" in p.stderr


# ---------------------------------------------------------------------------
# Failed ranks, killed launchers, leftovers (item 7)
# ---------------------------------------------------------------------------


def test_killed_rank_is_named_with_how_it_died(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    rank_code = (
        "import os, signal, time\n"
        "if os.environ['RANK'] == '1':\n    time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)\n"
        "time.sleep(60)\n"
    )
    p = collect(run, *fake_torchrun(2, rank_code))
    assert p.returncode == 1, p.stderr
    host = socket.gethostname()
    m = manifest(run)
    assert m["status"] == "failed"
    assert m["failure"].startswith("rank 1 (pid ")
    assert f"on {host}) died without exiting (killed by SIGKILL" in m["failure"]
    assert "; rank 0 (pid " in m["failure"] and "was stopped by SIGTERM" in m["failure"]
    assert f"run failed: {m['failure']}" in p.stderr
    assert "no process of the command ever called optimizer.step()" not in p.stderr
    assert "the ranks completed 0 optimizer steps" in p.stderr
    info0 = json.loads((run / "rank-0.info.json").read_text())
    assert info0["ended"] == {"how": "signal", "signal": "SIGTERM"} and info0["run_id"] == m["run_id"]


# Rank 0 fails only once rank 1 has ended and its launcher has reaped it (its /proc entry gone):
# the launcher stops the ranks still running when one fails, and on a loaded machine rank 1 could
# still be starting when rank 0 raised (its info file not yet written).
RAISE_AFTER_RANK_1 = """import json, os, time
if os.environ['RANK'] == '0':
    info, pid, deadline = {info!r}, None, time.time() + 60
    while time.time() < deadline:
        try:
            d = json.loads(open(info).read())
            pid = d['pid'] if d.get('ended') else None
        except (OSError, ValueError):
            pid = None
        if pid is not None and not os.path.exists(f'/proc/{{pid}}'):
            break
        time.sleep(0.02)
    raise ValueError('bad batch')
"""


def test_rank_exception_is_named(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    rank_code = RAISE_AFTER_RANK_1.format(info=str(run / "rank-1.info.json"))
    p = collect(run, *fake_torchrun(2, rank_code))
    assert p.returncode == 1
    assert manifest(run)["failure"].startswith("rank 0 (pid ")
    assert "raised ValueError: bad batch" in manifest(run)["failure"]
    assert json.loads((run / "rank-1.info.json").read_text())["ended"] == {"how": "exit"}


def test_sigint_gives_interrupted(tmp_path: Path, held: list) -> None:
    run = tmp_path / "run"
    proc = start_collect(
        run, *fake_torchrun(1, "import time; time.sleep(60)"), extra_env={}, start_new_session=True
    )
    held.append(proc)
    assert wait_for(lambda: (run / "rank-0.info.json").exists())
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(60)
    assert rc != 0
    m = manifest(run)
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGINT to the launcher"
    assert "run interrupted (SIGINT to the launcher)" in proc.stderr.read()


def test_the_wardens_lock_removal_waits_for_the_dead_launchers_hold(tmp_path: Path, monkeypatch) -> None:
    """The killed launcher's hold on the host's telemetry lock ends as the kernel closes its
    files, which can come after the warden woke up (a fresh-clone CI run once left the lock
    behind): the warden tries again for a while; a hold that stays (another launcher on this
    host) keeps the file. Holds are per open file, so a second open in this process conflicts."""
    import fcntl
    import types

    from charllm_trace.collectors import warden

    lock = tmp_path / "telemetry-h.lock"
    holder = open(lock, "a+")  # noqa: SIM115 - closed below, as the dead launcher's files are
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    now = [0.0]  # the warden's clock, moved by its waits
    waits: list[float] = []
    release_after = [None]  # the wait after which the hold ends (None: it never does)

    def sleep(s: float) -> None:
        waits.append(s)
        now[0] += s
        if release_after[0] is not None and len(waits) == release_after[0]:
            holder.close()

    monkeypatch.setattr(warden, "time", types.SimpleNamespace(monotonic=lambda: now[0], sleep=sleep))
    assert not warden.remove_lock(str(lock), wait_s=1.0)  # held throughout: left in place
    assert lock.exists() and 1.0 <= sum(waits) < 1.1  # tried until the deadline, not forever
    waits.clear()
    release_after[0] = 1  # the dead launcher's files closed during the first wait
    assert warden.remove_lock(str(lock), wait_s=1.0)
    assert len(waits) == 1 and not lock.exists()
    assert warden.remove_lock(str(tmp_path / "telemetry-none.lock"))  # nobody holds it


def test_sigkill_of_the_launcher_leaves_a_true_manifest_and_no_ranks(tmp_path: Path, held: list) -> None:
    stream = tmp_path / "stream.csv"  # SYNTHETIC telemetry: one device, a value every 20 ms
    stream.write_text("t_ns,device,power_w\n" + "".join(f"{k * 20_000_000},0,{k}\n" for k in range(30_000)))
    run = tmp_path / "run"
    rank_code = (
        "import os, time\n"
        "open(os.path.join(os.environ['RUN'], f'.tmp-{os.getpid()}-rank-{os.environ[\"RANK\"]}.kineto.json.gz'), 'w').write('half')\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "charllm_trace.cli.app",
            "collect",
            "-o",
            str(run),
            "--telemetry-source",
            f"replay:{stream}",
            "--",
            *fake_torchrun(2, rank_code),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env(RUN=str(run)),
        start_new_session=True,
    )
    held.append(proc)
    assert wait_for(lambda: len(list(run.glob(".tmp-*-rank-*"))) == 2)
    infos = [json.loads((run / f"rank-{r}.info.json").read_text()) for r in range(2)]
    assert manifest(run)["status"] == "running"
    t_kill = time.time_ns()
    os.killpg(
        proc.pid, signal.SIGKILL
    )  # the launcher and the fake torchrun; the ranks have their own sessions
    proc.wait(30)
    assert wait_for(lambda: manifest(run)["status"] != "running", 30)
    m = manifest(run)
    assert m["status"] == "interrupted"
    assert m["interrupted_by"] == f"the launcher (pid {proc.pid} on {socket.gethostname()}) was killed"
    assert m["finished_ns"] >= t_kill
    for i in infos:  # no orphaned rank processes
        assert not proc_alive(i["pid"], i["pid_start"])
    assert not list(run.glob(".tmp-*"))  # half-written rank files removed
    assert not list(run.glob("*.lock"))
    (node,) = run.glob("node-*.json")
    assert json.loads(node.read_text())["status"] == "interrupted"
    # A collect into this directory now is refused: the run has ended.
    p = collect(run, "true")
    assert p.returncode == 2 and "used run directory" in p.stderr


def test_ranks_die_with_their_parent(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    p = collect(
        run,
        *fake_torchrun(2, "import time; time.sleep(300)"),
        extra_env={"FAKE_EXIT_AT_ONCE": "1", "RUN": str(run)},
    )
    assert p.returncode == 0, p.stderr
    for r in range(2):  # PR_SET_PDEATHSIG: SIGTERM when the fake torchrun exited
        info = json.loads((run / f"rank-{r}.info.json").read_text())
        assert not proc_alive(info["pid"], info["pid_start"])
        assert info["ended"] == {"how": "signal", "signal": "SIGTERM"}
    m = manifest(run)
    assert m["status"] == "failed" and m["exit_code"] == 0
    assert m["failure"].startswith("the command exited with code 0 but its ranks did not: rank 0 (pid ")
    assert "was stopped by SIGTERM" in m["failure"]


def test_leftover_rank_processes_are_stopped(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    # Ranks that ignore SIGTERM outlive their parent: the launcher stops them (SIGKILL after 5 s).
    rank_code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    p = collect(run, *fake_torchrun(2, rank_code), extra_env={"FAKE_EXIT_AT_ONCE": "1", "RUN": str(run)})
    assert p.returncode == 0, p.stderr
    assert "stopped 2 process(es) the command left running" in p.stderr
    for r in range(2):
        info = json.loads((run / f"rank-{r}.info.json").read_text())
        assert not proc_alive(info["pid"], info["pid_start"])
        assert info["ended"] is None
    assert manifest(run)["status"] == "failed" and "died without exiting" in manifest(run)["failure"]


def test_rank_children_do_not_announce_themselves(spawn, tmp_path: Path) -> None:
    run = tmp_path / "run"
    # The rank starts a child Python process with the same RANK (as a data-loader worker would).
    rank_code = (
        "import json, os, subprocess, sys\n"
        "subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], check=True)\n"
    )
    p = collect(run, *fake_torchrun(1, rank_code))
    assert p.returncode == 0, p.stderr
    info = json.loads((run / "rank-0.info.json").read_text())
    assert info["ended"] == {"how": "exit"} and info["rank"] == 0


# ---------------------------------------------------------------------------
# Readers of run directories (converters/run_dir.py)
# ---------------------------------------------------------------------------


def _fixture_copy(tmp_path: Path) -> Path:
    import shutil

    from tests.conftest import FIXTURES

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "cpu-2rank-gloo", run)
    return run


def _convert(run: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "charllm_trace.cli.app",
            "convert",
            str(run),
            "-o",
            str(run.parent / "et"),
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, CHARLLM_TRACE_NO_CACHE="1"),
    )


def _dead_pid() -> tuple[int, int | None]:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid, None


def test_reader_says_a_run_was_interrupted_and_what_is_usable(spawn, tmp_path: Path) -> None:
    run = _fixture_copy(tmp_path)
    m = manifest(run)
    pid, _ = _dead_pid()
    # As a SIGKILL of everything leaves it: the manifest still running, its launcher gone, a
    # rank's half-written Kineto file under its temporary name, the rank's own file missing.
    m.update(
        status="running",
        exit_code=None,
        finished_ns=None,
        launcher={"host": socket.gethostname(), "pid": pid, "start": None},
    )
    (run / "manifest.json").write_text(json.dumps(m))
    (run / "rank-1.kineto.json.gz").rename(run / f".tmp-{pid}-rank-1.kineto.json.gz")
    (run / f".tmp-{pid}-rank-1.kineto.json.gz").write_bytes(b"\x1f\x8b half")
    p = _convert(run)
    assert p.returncode == 0, p.stderr
    (note,) = [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]
    assert note.startswith(f"note: {run}: this run was interrupted at ")
    assert "its launcher died without finishing the manifest" in note
    assert "usable: rank(s) 0 (host ET and Kineto profile), rank(s) 1 (one of the two)" in note
    assert f"ignored 1 half-written file(s) (.tmp-{pid}-rank-1.kineto.json.gz)" in note
    assert ".tmp-" not in "".join(ln for ln in p.stderr.splitlines() if ln.startswith("error"))


def test_reader_names_an_interrupted_manifest(spawn, tmp_path: Path) -> None:
    run = _fixture_copy(tmp_path)
    m = manifest(run)
    m.update(
        status="interrupted",
        finished_ns=1_700_000_000_000_000_000,
        interrupted_by="the launcher (pid 7 on vm) was killed",
    )
    (run / "manifest.json").write_text(json.dumps(m))
    p = _convert(run)
    assert p.returncode == 0, p.stderr
    assert (
        f"note: {run}: this run was interrupted at 2023-11-14 22:13:20 UTC (the launcher (pid 7 on vm) was killed); "
        "usable: rank(s) 0-1 (host ET and Kineto profile)"
    ) in p.stderr


def test_reader_refuses_files_of_two_runs(spawn, tmp_path: Path) -> None:
    run = _fixture_copy(tmp_path)
    m = manifest(run)
    m["run_id"] = "run-a"
    (run / "manifest.json").write_text(json.dumps(m))
    info = json.loads((run / "rank-1.info.json").read_text())
    info["run_id"] = "run-b"
    (run / "rank-1.info.json").write_text(json.dumps(info))
    p = _convert(run)
    assert p.returncode == 2
    assert (
        p.stderr.strip()
        == f"error: {run}: mixes two runs: manifest.json has run id 'run-a' but rank-1.info.json has 'run-b'"
    )


def test_orphaned_descendants_are_stopped(spawn, tmp_path: Path) -> None:
    # Not a rank (no RANK): a background process the command starts and leaves behind. The
    # launcher, a subreaper, adopts it when the command exits and stops it.
    run = tmp_path / "run"
    pid_file = tmp_path / "pid"
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
    )
    p = collect(run, sys.executable, "-c", code)
    assert p.returncode == 0, p.stderr
    pid = int(pid_file.read_text())
    assert (
        f"stopped 1 process(es) the command left running (its ranks or their orphaned children): pid {pid}"
        in p.stderr
    )
    assert not proc_alive(pid)
    assert manifest(run)["status"] == "finished"
