"""Switches that change one thing in a training step by a known amount (issue 22: predictions of
the what-if compared with real runs in which the change was made).

Used by ``train_tiny.py`` (gloo, CPU) and ``train_gpt_gpu.py`` (NCCL, GPU). Nothing here is active
unless ``--switches`` is given; then the machinery is installed in the base run too, so that the
only difference between a base step and a changed step is the change itself:

- ``--mm-repeat N``      : every matrix product (aten mm/addmm/bmm/baddbmm/addbmm, forward and
  backward) is computed N times (a TorchDispatchMode that is present with N = 1 in base steps);
- ``--allreduce-repeat N``: every gradient all-reduce is issued N times (N - 1 extra all-reduces of
  a zero buffer of the same size and type, before the real one), and so is every other collective
  of the step (the examples' explicit collectives, the parameter all-gather; not DDP's broadcast of
  the model's buffers before each forward): communication x N;
- ``--cpu-delay-us X``   : a busy-wait of X µs on the CPU before every operator that reaches the
  dispatcher (host-bound steps);
- ``--cpus A`` / ``--fewer-cpus B``: the cores the process may run on in base / changed steps
  (lists such as ``0-3`` or ``0,1``; with at least one core per rank each rank gets its share,
  ``cores[rank::world]``, otherwise all ranks share the list).

``--change-on odd`` applies the change on odd steps only, so every changed step has base
neighbours run under the same load (a paired comparison inside one run); ``all`` on every step.
``--switch-log PATH`` makes rank 0 write, per step, whether it was changed and how many delays ran.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
MATMUL = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.addbmm}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("interventions (issue 22)")
    g.add_argument("--switches", action="store_true", help="install the intervention switches")
    g.add_argument("--mm-repeat", type=int, default=1, help="compute every matrix product N times")
    g.add_argument("--allreduce-repeat", type=int, default=1, help="issue every gradient all-reduce N times")
    g.add_argument("--cpu-delay-us", type=float, default=0.0, help="busy-wait before every operator (µs)")
    g.add_argument("--cpus", default=None, help="cores of base steps, e.g. 0-3 or 0,1")
    g.add_argument("--fewer-cpus", default=None, help="cores of changed steps")
    g.add_argument("--change-on", choices=("all", "odd"), default="all", help="steps that get the change")
    g.add_argument("--switch-log", default=None, help="rank 0 writes the per-step switch log (JSON)")


def parse_cores(text: str | None) -> list[int] | None:
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _share(cores: list[int] | None, rank: int, world: int) -> set[int] | None:
    if cores is None:
        return None
    return set(cores[rank::world]) if len(cores) >= world else set(cores)


def _set_affinity(cores: set[int] | None) -> None:
    """Every thread of the process (os.sched_setaffinity(0) would move the calling thread only)."""
    if cores is None:
        return
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), cores)


class _Mode(TorchDispatchMode):
    """Repeats matrix products and busy-waits before operators while ``on``."""

    def __init__(self, mm_repeat: int, delay_ns: int) -> None:
        super().__init__()
        self.mm_repeat, self.delay_ns = mm_repeat, delay_ns
        self.on = False
        self.delays = 0
        self.matmuls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if self.on and self.delay_ns:
            end = time.perf_counter_ns() + self.delay_ns
            while time.perf_counter_ns() < end:
                pass
            self.delays += 1
        if func.overloadpacket in MATMUL:
            self.matmuls += 1
        if self.on and func.overloadpacket in MATMUL:
            for _ in range(self.mm_repeat - 1):
                func(*args, **kwargs)
        return func(*args, **kwargs)


class Switches:
    def __init__(self, args: argparse.Namespace, rank: int, world: int) -> None:
        self.enabled = bool(args.switches)
        self.args, self.rank, self.world = args, rank, world
        self.base_cores = _share(parse_cores(args.cpus), rank, world)
        self.fewer_cores = _share(parse_cores(args.fewer_cpus), rank, world)
        self.mode = _Mode(args.mm_repeat, int(args.cpu_delay_us * 1000))
        self.changed = False
        self.log: list[dict[str, object]] = []
        self._scratch: dict[tuple, torch.Tensor] = {}

    @contextlib.contextmanager
    def installed(self):  # noqa: ANN201
        if not self.enabled:
            yield self
            return
        _set_affinity(self.base_cores)
        with self.mode:
            yield self

    def start_step(self, step: int) -> None:
        if not self.enabled:
            return
        self.changed = self.args.change_on == "all" or step % 2 == 1
        self.mode.on = self.changed
        self.mode.delays = self.mode.matmuls = 0
        if self.fewer_cores is not None:
            _set_affinity(self.fewer_cores if self.changed else self.base_cores)

    def end_step(self, step: int, seconds: float) -> None:
        if self.enabled:
            self.mode.on = False
            self.log.append(
                {
                    "step": step,
                    "changed": self.changed,
                    "s": seconds,
                    "delays": self.mode.delays,
                    "matmuls": self.mode.matmuls,
                }
            )

    def extra_allreduces(self, t: torch.Tensor, op: object) -> list[object]:
        """Issue the extra all-reduces of a changed step (async, of a zero buffer like ``t``)."""
        if not (self.enabled and self.changed):
            return []
        key = (t.numel(), t.dtype, t.device)
        if key not in self._scratch:
            self._scratch[key] = torch.zeros_like(t)
        buf = self._scratch[key]
        return [dist.all_reduce(buf, op=op, async_op=True) for _ in range(self.args.allreduce_repeat - 1)]

    def comm_repeats(self) -> int:
        """How many times the step's other collectives run (1 unless a changed step repeats them)."""
        return self.args.allreduce_repeat if self.enabled and self.changed else 1

    def ddp_hook(self, state, bucket):  # noqa: ANN001, ANN201 (DDP checks the annotations)
        """DDP's default all-reduce (sum, then mean) with the extra all-reduces before it."""
        buf = bucket.buffer()
        extra = [w.get_future() for w in self.extra_allreduces(buf, dist.ReduceOp.SUM)]
        buf.div_(self.world)
        fut = dist.all_reduce(buf, async_op=True).get_future()
        if not extra:
            return fut.then(lambda f: f.value()[0])
        return torch.futures.collect_all([*extra, fut]).then(lambda f: f.value()[-1].value()[0])

    def write_log(self) -> None:
        if self.enabled and self.rank == 0 and self.args.switch_log:
            with open(self.args.switch_log, "w") as f:
                json.dump({"switches": _settings(self.args), "steps": self.log}, f)


def _settings(args: argparse.Namespace) -> dict[str, object]:
    keys = ("mm_repeat", "allreduce_repeat", "cpu_delay_us", "cpus", "fewer_cpus", "change_on")
    return {k: getattr(args, k) for k in keys}
