"""``collect --cpus N``: N cores per rank process (issue 24 item 5, the CPU-allocation sweep).

The launcher plans the allocation from the cores it may use itself (``sched_getaffinity``) and the
number of local ranks the command starts (torchrun's ``--nproc-per-node``, else 1):

- when N × local ranks fit, local rank k gets its own cores ``cores[k·N:(k+1)·N]``;
- otherwise every local rank shares the first N cores (``shared``: true in the manifest).

The command's process is started with the union of the lists; each rank process (the injected
``sitecustomize``) narrows itself to its own list by ``LOCAL_RANK`` before anything else runs, so
every thread it starts inherits it. Where the machine allows it the command also runs under a
cgroup v2 CPU quota (``cpu.max``, ``collectors/cpu_quota.py``); the manifest's ``cpus.quota`` says
whether one was set, and why not. The plan is recorded in the manifest's ``cpus``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from charllm_trace.collectors import cpu_quota
from charllm_trace.core.errors import UsageError

_NPROC = re.compile(r"^--nproc[-_]per[-_]node(?:=(.*))?$")


def available_cores() -> list[int]:
    """The cores this process may run on, ascending."""
    return sorted(os.sched_getaffinity(0))


def parse_cpus(text: str | int | None) -> int | None:
    """``--cpus`` -> cores per rank (None: not given). UsageError for anything but a whole number
    from 1 to the cores this process may use."""
    if text is None:
        return None
    s = str(text).strip()
    have = len(available_cores())
    if not (s.isascii() and s.isdigit()) or int(s) < 1:
        raise UsageError(f"--cpus {text!r}: expected a whole number of cores per rank, 1 to {have}")
    if int(s) > have:
        raise UsageError(f"--cpus {s}: this machine lets the collector use {have} core(s)")
    return int(s)


def local_ranks(command: list[str]) -> int:
    """How many rank processes the command starts on this node: torchrun's ``--nproc-per-node``
    (``--nproc_per_node``, a number), else 1."""
    for i, a in enumerate(command):
        m = _NPROC.match(a)
        if m:
            v = m.group(1) if m.group(1) is not None else (command[i + 1] if i + 1 < len(command) else "")
            return int(v) if v.isdigit() and int(v) >= 1 else 1
    return 1


def plan(per_rank: int, command: list[str]) -> dict[str, Any]:
    """The allocation of ``per_rank`` cores to each local rank of ``command`` (module docstring)."""
    cores = available_cores()
    n = local_ranks(command)
    shared = per_rank * n > len(cores)
    lists = [cores[:per_rank]] * n if shared else [cores[k * per_rank : (k + 1) * per_rank] for k in range(n)]
    union = sorted({c for lst in lists for c in lst})
    return {
        "per_rank": per_rank,
        "local_ranks": n,
        "lists": lists,
        "shared": shared,
        "command_cores": union,
        "available": cores,
    }


def pin_command(alloc: dict[str, Any]) -> Any:
    """A ``preexec_fn`` that puts the command on the union of the ranks' cores, and in the quota's
    cgroup when one was made (``alloc["quota"]``, ``cpu_quota.prepare``)."""
    cores = set(alloc["command_cores"])
    quota = alloc.get("quota") or {}

    def pin() -> None:
        os.sched_setaffinity(0, cores)
        cpu_quota.join(quota)

    return pin
