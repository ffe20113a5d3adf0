"""``charllm-trace collect``: run a training command with tracing injected and telemetry sampled.

The launcher

1. finds the run id (shared by every node, see :mod:`charllm_trace.collectors.runstate`) and
   checks the run directory on every node: a used one (files of another run, or of this run
   after it ended) is refused without ``force``;
2. writes ``node-<host>.json`` (and on node 0 ``manifest.json``) as ``running``, starts the
   warden (:mod:`charllm_trace.collectors.warden`, which finishes the manifest if the launcher is
   killed) and the node's telemetry sampler (a separate process);
3. runs the command with ``charllm_trace/collectors/_inject`` first on ``PYTHONPATH`` and the
   configuration in ``$CHARLLM_TRACE_CONFIG``, so every Python rank process hooks
   ``optimizer.step()`` and traces the chosen steps (see :mod:`charllm_trace.collectors.hook`);
4. waits for it (forwarding SIGINT/SIGTERM), stops rank processes of this run the command left
   running on this host, stops the sampler, writes ``manifest.json`` (``finished``, ``failed``
   with which rank failed and how, or ``interrupted``);
5. returns the command's exit code.

Multi-node: run the same ``collect`` on every node (e.g. under ``srun``) with the same ``-o`` on a
shared file system. Every node checks the directory and writes its own ``telemetry-<host>.*``
and ``node-<host>.json``; only node 0 (``NODE_RANK``/``GROUP_RANK``/``SLURM_NODEID``, or
``--node-rank`` of torchrun) writes the manifest. A second launcher on the same host does not
start a second sampler.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charllm_trace.collectors.hook import ENV_CONFIG
from charllm_trace.collectors.outcome import traced_unsaved
from charllm_trace.core.errors import InputError, UsageError
from charllm_trace.core.limits import (
    parse_ranks,  # noqa: F401 - the launcher's --ranks (tests import it here)
    parse_span,
)

INJECT_DIR = str(Path(__file__).resolve().parent / "_inject")
PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "ep", "etp", "sp", "vpp")
#: Files the collector writes into a run directory (what --force clears).
OWN_PATTERNS = (
    "rank-*.host_et.json.gz",
    "rank-*.kineto.json.gz",
    "rank-*.info.json",
    "telemetry-*.csv",
    "telemetry-*.meta.json",
    "telemetry-*.lock",
    "cpusched-*.csv",
    "cpusched-*.meta.json",
    "node-*.json",
    "manifest.json",
    ".tmp-*",
)


# ---------------------------------------------------------------------------
# Option parsing (pure; raise UsageError)
# ---------------------------------------------------------------------------


def parse_steps(text: str, *, allow_zero: bool = False) -> tuple[int, int]:
    """``"10-12"`` -> (10, 12); ``"5"`` -> (5, 5). Steps are 0-based (see hook.py)."""
    span = parse_span(text or "")
    if span is None:
        raise UsageError(f"--steps {text!r}: expected N or A-B (for example 10-12)")
    a, b = span
    if b < a:
        raise UsageError(f"--steps {text!r}: the range ends before it starts")
    if a == 0 and not allow_zero:
        raise UsageError(
            "--steps: step 0 cannot be traced without changing the script (it begins before the first "
            "optimizer.step() the hook sees); start at 1, or use the Python API (charllm_trace.collectors.session)"
        )
    return a, b


def parse_parallel(text: str | None) -> dict[str, int] | None:
    """``"tp=8,pp=4,dp=2,ep=1"`` -> {"tp": 8, "pp": 4, "dp": 2, "ep": 1}."""
    if not text:
        return None
    out: dict[str, int] = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*([a-z]+)\s*=\s*(\d+)\s*", part.lower())
        if not m or m.group(1) not in PARALLEL_KEYS:
            raise UsageError(
                f"--parallel {text!r}: expected KEY=N pairs with KEY in {', '.join(PARALLEL_KEYS)}"
            )
        n = int(m.group(2))
        if n < 1:
            raise UsageError(f"--parallel {text!r}: {m.group(1)} must be at least 1")
        out[m.group(1)] = n
    return out


#: ``--workload`` keys (short and long) -> the manifest's ``workload`` field; all but model are counts
WORKLOAD_KEYS = {
    "model": "model",
    "mbs": "micro_batch",
    "micro_batch": "micro_batch",
    "gbs": "global_batch",
    "global_batch": "global_batch",
    "seq": "seq_len",
    "seq_len": "seq_len",
    "tokens_per_step": "tokens_per_step",
}


def parse_workload(text: str | None) -> dict[str, str | int] | None:
    """``"model=llama-7b,mbs=1,gbs=256,seq=4096"`` -> {"model": "llama-7b", "micro_batch": 1,
    "global_batch": 256, "seq_len": 4096} (the manifest's ``workload``; ``compare`` lists it)."""
    if not text:
        return None
    out: dict[str, str | int] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        field = WORKLOAD_KEYS.get(key.strip().lower())
        value = value.strip()
        if field is None or not value:
            raise UsageError(
                f"--workload {text!r}: expected KEY=VALUE pairs with KEY in {', '.join(WORKLOAD_KEYS)}"
            )
        if field == "model":
            out[field] = value
        elif value.isdigit() and int(value) >= 1:
            out[field] = int(value)
        else:
            raise UsageError(f"--workload {text!r}: {key.strip()} must be a whole number ≥ 1")
    return out


def node_rank(command: list[str]) -> int:
    """This node's rank from the environment or torchrun's ``--node-rank`` option (0 if unknown)."""
    for var in ("NODE_RANK", "GROUP_RANK", "SLURM_NODEID", "OMPI_COMM_WORLD_NODE_RANK"):
        v = os.environ.get(var)
        if v and v.isdigit():
            return int(v)
    for i, a in enumerate(command):
        for opt in ("--node-rank", "--node_rank"):
            if a == opt and i + 1 < len(command) and command[i + 1].isdigit():
                return int(command[i + 1])
            if a.startswith(opt + "=") and a.split("=", 1)[1].isdigit():
                return int(a.split("=", 1)[1])
    return 0


# ---------------------------------------------------------------------------
# Run directory
# ---------------------------------------------------------------------------


def prepare_run_dir(run_dir: Path, *, force: bool, run_id: str) -> None:
    """Create ``run_dir``; refuse a used one (anything but files of run ``run_id`` while it is
    running) unless ``force``, which deletes the collector's own files of other runs (and keeps
    everything else)."""
    from charllm_trace.collectors.runstate import foreign_entries

    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(run_dir, "exists and is not a directory")
    if run_dir.is_dir():
        foreign = foreign_entries(run_dir, run_id)
        if foreign and not force:
            name, why = foreign[0]
            if why == "not a file of this run" and len(foreign) == len(os.listdir(run_dir)):
                raise InputError(
                    run_dir, "run directory exists and is not empty (use --force to replace its trace files)"
                )
            more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
            raise InputError(
                run_dir,
                f"used run directory: {name} is {why}{more} (use another directory, or --force to "
                "replace the collector's files of other runs)",
            )
        own = {os.path.basename(p) for pat in OWN_PATTERNS for p in glob.glob(str(run_dir / pat))}
        for name, _why in foreign:
            if name in own:
                try:
                    os.remove(run_dir / name)
                except FileNotFoundError:
                    pass  # another node of this run removed it first
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(run_dir, f"cannot create run directory: {exc.strerror}") from None
    if not os.access(run_dir, os.W_OK):
        raise InputError(run_dir, "run directory is not writable")


def default_run_dir() -> str:
    return time.strftime("charllm-run-%Y%m%d-%H%M%S")


@dataclass
class CollectResult:
    exit_code: int
    run_dir: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    telemetry_note: str | None = None


def _host_lock(run_dir: Path) -> Any:
    """An exclusive lock per host: only the first launcher on a host starts a sampler."""
    from charllm_trace.collectors.telemetry.format import host_tag

    f = open(run_dir / f"telemetry-{host_tag()}.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


@dataclass
class _Launch:
    """One node's collection as it goes: the run directory and ids, the CPU allocation, the
    manifest's arguments and the helper processes started for it."""

    rd: Path
    nrank: int
    run_id: str
    launcher: Any
    alloc: dict[str, Any] | None
    manifest_args: dict[str, Any]
    warden: Any = None
    lock: Any = None
    sampler: Any = None
    subreaper: bool = False

    @property
    def ids(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "launcher": self.launcher}


def _check_command(command: list[str], telemetry_hz: float) -> None:
    if not command:
        raise UsageError(
            "no training command given (put it after --, e.g. -- torchrun --nproc_per_node 2 train.py)"
        )
    if telemetry_hz < 0:
        raise UsageError("--telemetry-hz must be positive (0 turns telemetry off)")


def _open_run(
    command: list[str], run_dir: str | os.PathLike[str] | None, force: bool
) -> tuple[Path, int, str]:
    """(run directory, node rank, run id), the directory checked and prepared."""
    from charllm_trace.collectors.runstate import adopt_run_id, new_run_id, shared_run_id

    rd = Path(run_dir if run_dir is not None else default_run_dir()).resolve()
    nrank = node_rank(command)
    if rd.exists() and not rd.is_dir():
        raise InputError(rd, "exists and is not a directory")
    run_id = shared_run_id(command)
    if run_id is None:
        run_id = new_run_id() if nrank == 0 else adopt_run_id(rd, nrank)
    prepare_run_dir(rd, force=force, run_id=run_id)
    return rd, nrank, run_id


def _allocate(cpus: int | None, command: list[str]) -> dict[str, Any] | None:
    from charllm_trace.collectors import cpu_alloc, cpu_quota  # collect --cpus

    alloc = cpu_alloc.plan(cpus, command) if cpus else None
    if alloc is not None:  # a cgroup cpu.max quota where the machine allows one (cpu_quota.py)
        alloc["quota"] = cpu_quota.prepare(len(alloc["command_cores"]), str(os.getpid()))
    return alloc


def _add_cgroup_cpu_max(manifest_args: dict[str, Any], alloc: dict[str, Any] | None, cpu_hz: float) -> None:
    """The command's cgroup CPU quota, with the CPU figures."""
    from charllm_trace.collectors import cpu_quota, cpu_sched  # collect --cpus, --cpu-hz

    if alloc is not None or cpu_hz > 0:
        mine = alloc["quota"].get("cgroup") if alloc is not None else None
        manifest_args["cgroup_cpu_max"] = cpu_quota.read_cpu_max(mine or cpu_sched.cgroup_dir(os.getpid()))


def _start_watch(ln: _Launch, telemetry_hz: float, telemetry_source: str, say: Any) -> None:
    """Write the node info (and on node 0 the manifest) as running; start the warden and, unless
    another collector on this host samples it, the telemetry sampler."""
    from charllm_trace.collectors.manifest import write_manifest, write_node_info
    from charllm_trace.collectors.telemetry.format import host_tag
    from charllm_trace.collectors.telemetry.sampler import start_sampler_process
    from charllm_trace.collectors.warden import start_warden

    command = ln.manifest_args["command"]
    write_node_info(ln.rd, command=command, node_rank=ln.nrank, status="running", **ln.ids)
    if ln.nrank == 0:
        write_manifest(ln.rd, **ln.manifest_args, exit_code=None, finished_ns=None, **ln.ids)
    ln.warden = start_warden(
        {
            "run_dir": str(ln.rd),
            "run_id": ln.run_id,
            "launcher": ln.launcher,
            "manifest_args": ln.manifest_args,
            "lock": str(ln.rd / f"telemetry-{host_tag()}.lock") if telemetry_hz > 0 else None,
        }
    )
    if telemetry_hz > 0:
        ln.lock = _host_lock(ln.rd)
        if ln.lock is not None:
            ln.sampler = start_sampler_process(str(ln.rd), telemetry_hz, telemetry_source)
        else:
            say("telemetry: another collector on this host already samples it")


def _command_env(cfg: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    env[ENV_CONFIG] = json.dumps(cfg)
    env["PYTHONPATH"] = INJECT_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _spawn(ln: _Launch, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the command; if it cannot run, stop what was started and leave the directory as it was."""
    from charllm_trace.collectors import cpu_alloc, cpu_quota
    from charllm_trace.collectors.runstate import set_subreaper
    from charllm_trace.collectors.telemetry.format import host_tag
    from charllm_trace.collectors.telemetry.sampler import stop_sampler_process
    from charllm_trace.collectors.warden import dismiss

    alloc = ln.alloc
    ln.subreaper = set_subreaper(True)  # ranks whose parent dies become ours, to be stopped at the end
    try:
        return subprocess.Popen(command, env=env, preexec_fn=cpu_alloc.pin_command(alloc) if alloc else None)
    except OSError as exc:
        if ln.subreaper:
            set_subreaper(False)
        if ln.sampler is not None:
            stop_sampler_process(ln.sampler)
        dismiss(ln.warden)
        _release(ln.lock)
        for p in ln.rd.iterdir():  # nothing ran: leave the directory as it was
            if (p.name == "manifest.json" and ln.nrank == 0) or p.name == f"node-{host_tag()}.json":
                p.unlink()
        cpu_quota.remove(alloc["quota"] if alloc else None)
        raise InputError(command[0], f"cannot run the training command: {exc.strerror}") from None


def _wait(proc: subprocess.Popen[bytes]) -> tuple[int, list[str]]:
    """The command's return code, SIGINT/SIGTERM to the launcher forwarded to it (and listed)."""
    interrupted_by: list[str] = []

    def forward(signum: int, frame: Any) -> None:
        interrupted_by.append(f"{signal.Signals(signum).name} to the launcher")
        if proc.poll() is None:
            proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return rc, interrupted_by


def _stop_helpers(ln: _Launch, cpu: Any, rc: int, interrupted_by: list[str], say: Any) -> tuple[str, Any]:
    """Stop what the command left running on this host, the sampler, the CPU sampler, the quota
    and the host lock. Returns (status, failure)."""
    from charllm_trace.collectors import cpu_quota, cpu_sched
    from charllm_trace.collectors.runstate import set_subreaper
    from charllm_trace.collectors.telemetry.sampler import stop_sampler_process

    keep = {p.pid for p in (ln.sampler, ln.warden, cpu) if p is not None}
    status, failure, left = _ending(ln.rd, ln.run_id, rc, interrupted_by, keep if ln.subreaper else None)
    if ln.subreaper:
        set_subreaper(False)
    if left:
        say(
            f"stopped {len(left)} process(es) the command left running (its ranks or their orphaned children): pid {', '.join(map(str, left))}"
        )
    if ln.sampler is not None:
        stop_sampler_process(ln.sampler)
    if cpu is not None:
        cpu_sched.stop(cpu)
    cpu_quota.remove(ln.alloc["quota"] if ln.alloc else None)
    _release(ln.lock)
    return status, failure


def _no_step_traced(
    rd: Path, status: str, steps: tuple[int, int], step_marker: str | None, window: Any
) -> str:
    """Why no rank traced a step, from the ranks' info files and the command's status."""
    infos = _rank_infos(rd)
    done = [i.get("steps_completed") for i in infos]
    if traced_unsaved(infos):
        return f"no rank's trace was saved: {traced_unsaved(infos)} (rank-*.info.json), but the command {status} before the profiler wrote it"
    if done:
        return (
            f"no rank traced any step: the ranks completed {max(done)} {'iterations' if step_marker else 'optimizer steps'}, "
            f"the window was {steps[0]}-{steps[1]}"
        )
    if status == "finished":
        what = f"opened a {step_marker!r} range" if step_marker else "called optimizer.step()"
        what = "ran until the window's start (or imported torch)" if window else what
        return f"no rank traced any step: no process of the command ever {what}"
    return f"no rank traced any step: the command {status} before any rank recorded an optimizer step"


def collect(
    command: list[str],
    run_dir: str | os.PathLike[str] | None = None,
    *,
    steps: tuple[int, int] = (1, 2),
    ranks: list[int] | None = None,
    telemetry_hz: float = 100.0,
    telemetry_source: str = "auto",
    parallel: dict[str, int] | None = None,
    workload: dict[str, str | int] | None = None,
    force: bool = False,
    record_shapes: bool = True,
    with_stack: bool = False,
    log: Any = None,
    step_marker: str | None = None,
    window: tuple[float, float] | None = None,
    cpu_hz: float = 0.0,
    cpus: int | None = None,
) -> CollectResult:
    """Run ``command`` with collection; return its exit code and what was written."""
    from charllm_trace.collectors import cpu_sched  # collect --cpu-hz
    from charllm_trace.collectors.manifest import write_manifest, write_node_info
    from charllm_trace.collectors.runstate import proc_start, this_process
    from charllm_trace.collectors.telemetry.format import host_tag
    from charllm_trace.collectors.warden import dismiss, tell

    def say(msg: str) -> None:
        if log is not None:
            log(msg)

    _check_command(command, telemetry_hz)
    rd, nrank, run_id = _open_run(command, run_dir, force)
    launcher = this_process()
    started_ns = time.time_ns()
    alloc = _allocate(cpus, command)
    manifest_args: dict[str, Any] = {
        "command": list(command),
        "steps": steps,
        "ranks": ranks,
        "telemetry_hz": telemetry_hz,
        "parallel": parallel,
        "workload": workload,
        "started_ns": started_ns,
        "node_rank": nrank,
        "cpus": alloc,
        "step_marker": step_marker,
    }
    _add_cgroup_cpu_max(manifest_args, alloc, cpu_hz)
    ln = _Launch(rd, nrank, run_id, launcher, alloc, manifest_args)
    _start_watch(ln, telemetry_hz, telemetry_source, say)
    cfg = {
        "run_dir": str(rd),
        "steps": list(steps),
        "ranks": ranks,
        "record_shapes": record_shapes,
        "with_stack": with_stack,
        "run_id": run_id,
        "launcher_pid": os.getpid(),
        "marker": step_marker,  # iterations: ranges of this record_function name (marker_hook.py)
        "window": list(window) if window else None,  # or seconds DELAY, DURATION from the start
        "cpus": alloc["lists"] if alloc else None,  # each local rank's cores (_inject/sitecustomize)
    }
    env = _command_env(cfg)
    say(f"collect: {shlex.join(command)} -> {rd} (steps {steps[0]}-{steps[1]})")
    proc = _spawn(ln, command, env)
    tell(ln.warden, {"child": proc.pid, "start": proc_start(proc.pid)})
    cpu = cpu_sched.start(str(rd), proc.pid, cpu_hz, host_tag()) if cpu_hz > 0 else None
    rc, interrupted_by = _wait(proc)
    exit_code = rc if rc >= 0 else 128 - rc  # killed by a signal: shell convention
    status, failure = _stop_helpers(ln, cpu, rc, interrupted_by, say)
    finished_ns = time.time_ns()
    write_node_info(
        rd, command=command, node_rank=nrank, status=status, exit_code=exit_code, failure=failure, **ln.ids
    )
    manifest: dict[str, Any] = {}
    if nrank == 0:
        manifest = write_manifest(
            rd,
            **manifest_args,
            exit_code=exit_code,
            finished_ns=finished_ns,
            status=status,
            failure=failure,
            interrupted_by=interrupted_by[0] if interrupted_by else None,
            **ln.ids,
        )
    dismiss(ln.warden)
    if status == "interrupted":
        say(f"run interrupted ({interrupted_by[0]})" + (f": {failure}" if failure else ""))
    elif failure:
        say(f"run failed: {failure}")
    note = _telemetry_note(rd)
    if note:
        say(note)
    if nrank == 0 and manifest and not manifest.get("ranks_traced"):
        say(_no_step_traced(rd, status, steps, step_marker, window))
    return CollectResult(exit_code=exit_code, run_dir=rd, manifest=manifest, telemetry_note=note)


def _release(lock: Any) -> None:
    if lock is not None:
        lock.close()
        try:
            os.remove(lock.name)
        except OSError:
            pass


def _ending(
    rd: Path, run_id: str, rc: int, interrupted_by: list[str], keep: set[int] | None
) -> tuple[str, str | None, list[int]]:
    """(status, failure in words, pids of leftover processes stopped) once the command ended.

    Leftovers: this run's rank processes on this host still alive, and (``keep`` not None: the
    launcher is a subreaper) any orphaned descendant adopted by the launcher, except ``keep``."""
    from charllm_trace.collectors.outcome import (
        orphan_ranks,
        own_ranks,
        rank_failure,
        rank_infos,
        remove_rank_temporaries,
    )
    from charllm_trace.collectors.runstate import children_of_self, reap_children_except, stop_processes

    procs = orphan_ranks(rank_infos(rd, run_id), os.getpid())
    if keep is not None:
        procs += [c for c in children_of_self(keep) if c not in procs]
    left = stop_processes(procs)
    if keep is not None:
        reap_children_except(keep)
    infos = rank_infos(rd, run_id)
    remove_rank_temporaries(rd, infos)
    failure = rank_failure(own_ranks(infos, os.getpid()))
    if interrupted_by:
        return "interrupted", failure, left
    if rc == 0:
        if failure is None:
            return "finished", None, left
        return "failed", f"the command exited with code 0 but its ranks did not: {failure}", left
    if failure is None:
        failure = (
            f"the command was killed by {signal.Signals(-rc).name}"
            if rc < 0 and -rc in signal.valid_signals()
            else f"the command exited with code {rc}"
        )
    return "failed", failure, left


def _rank_infos(rd: Path) -> list[dict[str, Any]]:
    out = []
    for p in rd.glob("rank-*.info.json"):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and isinstance(d.get("steps_completed"), int):
            out.append(d)
    return out


def _telemetry_note(rd: Path) -> str | None:
    from charllm_trace.collectors.telemetry.format import meta_path

    mp = meta_path(rd)
    try:
        with open(mp) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return None
    if m.get("source") is None:
        return f"telemetry: no power source on {m.get('host')}: {m.get('no_source_reason')}"
    hz = m.get("achieved_hz")
    per = m.get("sensor_update_period_ms") or {}
    pers = sorted({round(v, 1) for v in per.values() if v is not None})
    return (
        f"telemetry: {m.get('source')}, {len(m.get('devices') or [])} device(s), "
        f"{hz:.1f} Hz achieved of {m.get('requested_hz')} requested"
        + (f", sensor updates every {'/'.join(str(p) for p in pers)} ms" if pers else "")
        if hz
        else f"telemetry: {m.get('source')}, no samples"
    )


def main_exit_code(result: CollectResult) -> int:
    return result.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(collect(sys.argv[1:], log=print).exit_code)
