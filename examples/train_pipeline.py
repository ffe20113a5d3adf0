"""A tiny two-stage pipeline (1F1B schedule) with data parallelism, over gloo on CPU.

``--pp`` pipeline stages times ``--dp`` data-parallel replicas; global ranks are laid out
in Megatron-LM's order (data-parallel index fastest, stage slowest), so with ``--pp 2 --dp 2``
ranks 0 and 1 hold stage 0 and ranks 2 and 3 stage 1; ranks {0, 2} and {1, 3} form the two
pipelines (process groups described ``pp``), {0, 1} and {2, 3} the data-parallel groups
(``dp``). Every stage is the same stack of ``--layers`` linear layers, so stage times are equal.

Each step runs ``--microbatches`` microbatches in the one-forward-one-backward (1F1B)
schedule: stage s first runs ``pp - s - 1`` forwards (warm-up), then alternates one forward
and one backward (steady state), then runs the remaining backwards (cool-down). Activations
go forward and gradients backward with explicit send/recv on the pipeline group; after the
last backward every stage all-reduces its gradients over its data-parallel group and steps
its optimizer. Every microbatch's work is labelled with ``record_function``:
``forward_mb<k>`` and ``backward_mb<k>`` (k from 0), so the schedule is visible in a trace;
the sends and receives are outside the labels (as in Megatron-LM's schedules).

``--delay-ms D`` sleeps D ms before every forward of the last stage (inside its label):
a deliberate imbalance whose effect on the other stages' bubbles is known.

    torchrun --nproc_per_node 4 examples/train_pipeline.py --pp 2 --dp 2
"""

from __future__ import annotations

import argparse
import gc
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.profiler import record_function


def stage_model(width: int, layers: int) -> nn.Module:
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*mods)


def make_groups(pp: int, dp: int, rank: int) -> tuple[dist.ProcessGroup, dist.ProcessGroup, list[int]]:
    """This rank's pipeline group, data-parallel group and its pipeline's ranks (every rank
    creates every group, as new_group requires)."""
    pipe = dp_group = None
    pipe_ranks: list[int] = []
    for d in range(dp):
        ranks = [d + dp * s for s in range(pp)]
        g = dist.new_group(ranks, group_desc="pp")
        if rank in ranks:
            pipe, pipe_ranks = g, ranks
    for s in range(pp):
        ranks = [d + dp * s for d in range(dp)]
        g = dist.new_group(ranks, group_desc="dp")
        if rank in ranks:
            dp_group = g
    assert pipe is not None and dp_group is not None
    return pipe, dp_group, pipe_ranks


class Stage:
    """One pipeline stage's work on one step: forwards and backwards of microbatches in 1F1B."""

    def __init__(
        self,
        args: argparse.Namespace,
        model: nn.Module,
        stage: int,
        pipe_ranks: list[int],
        pipe: dist.ProcessGroup,
        gen: torch.Generator,
    ) -> None:
        self.args, self.model, self.stage, self.pipe = args, model, stage, pipe
        self.prev = pipe_ranks[stage - 1] if stage > 0 else None
        self.next = pipe_ranks[stage + 1] if stage + 1 < len(pipe_ranks) else None
        self.gen = gen
        self.pending: list[dist.Work] = []
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.losses: list[float] = []

    def _shape(self) -> tuple[int, int]:
        return (self.args.mb_size, self.args.width)

    def forward(self, mb: int) -> None:
        if self.prev is None:
            x = torch.randn(self._shape(), generator=self.gen)
        else:  # receive outside the label: the label holds the stage's own work only
            x = torch.empty(self._shape())
            dist.recv(x, src=self.prev, group=self.pipe)
        with record_function(f"forward_mb{mb}"):
            if self.args.delay_ms and self.next is None:
                time.sleep(self.args.delay_ms / 1e3)
            x.requires_grad_(self.prev is not None)
            y = self.model(x)
            if self.next is None:
                y = (y * y).mean()  # the loss
        if self.next is None:
            self.losses.append(float(y.detach()))
        else:
            self.pending.append(dist.isend(y.detach().contiguous(), dst=self.next, group=self.pipe))
        self.saved[mb] = (x, y)

    def backward(self, mb: int) -> None:
        x, y = self.saved.pop(mb)
        g = None
        if self.next is not None:
            g = torch.empty(self._shape())
            dist.recv(g, src=self.next, group=self.pipe)
        with record_function(f"backward_mb{mb}"):
            y.backward(g)
        if self.prev is not None:
            self.pending.append(dist.isend(x.grad.contiguous(), dst=self.prev, group=self.pipe))

    def run_1f1b(self, pp: int, m: int) -> None:
        warm = min(pp - self.stage - 1, m)
        for mb in range(warm):
            self.forward(mb)
        for i in range(m - warm):
            self.forward(warm + i)
            self.backward(i)
        for mb in range(m - warm, m):
            self.backward(mb)
        for w in self.pending:
            w.wait()
        self.pending.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--mb-size", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="sleep before each forward of the last stage")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == args.pp * args.dp, f"world {world} != pp {args.pp} * dp {args.dp}"
    pipe, dp_group, pipe_ranks = make_groups(args.pp, args.dp, rank)
    stage = rank // args.dp
    torch.manual_seed(stage)  # replicas of a stage start equal
    model = stage_model(args.width, args.layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    st = Stage(args, model, stage, pipe_ranks, pipe, torch.Generator().manual_seed(1234 + rank))
    t0 = time.perf_counter()
    for step in range(args.steps):
        st.run_1f1b(args.pp, args.microbatches)
        with record_function("dp_grad_allreduce"):
            for p in model.parameters():
                dist.all_reduce(p.grad, group=dp_group)
                p.grad /= args.dp
        opt.step()
        opt.zero_grad(set_to_none=True)
        if st.losses and step < 10:
            print(f"rank {rank} step {step} loss {sum(st.losses) / len(st.losses):.5f}", flush=True)
        st.losses.clear()
    if rank == 0:
        print(f"done: {args.steps} steps in {time.perf_counter() - t0:.2f} s", flush=True)
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
