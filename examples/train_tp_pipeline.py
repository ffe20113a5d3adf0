"""Tensor parallelism inside each stage of a two-stage pipeline (1F1B), over gloo on CPU.

``--tp`` tensor-parallel ranks times ``--pp`` pipeline stages; global ranks follow Megatron-LM's
order (tensor-parallel index fastest, stage slowest), so with ``--tp 2 --pp 2`` ranks 0 and 1 hold
stage 0 and ranks 2 and 3 stage 1; {0, 1} and {2, 3} are the tensor-parallel groups (described
``tp``), {0, 2} and {1, 3} the pipelines (``pp``).

Every layer of a stage is Megatron's MLP split: a column-parallel linear (each tensor-parallel rank
holds ``width / tp`` of its output features), tanh, a row-parallel linear (``width / tp`` of its
input features) whose partial outputs are summed by an all-reduce over the tensor-parallel group;
in the backward pass the gradient of the block's input is all-reduced the same way. Each tensor
rank of a stage sends its (replicated) activations to the same tensor rank of the next stage and
receives gradients back, with the schedule, labels (``forward_mb<k>`` / ``backward_mb<k>``) and
``--delay-ms`` of ``examples/train_pipeline.py``, whose ``Stage`` it uses.

    torchrun --nproc_per_node 4 examples/train_tp_pipeline.py --tp 2 --pp 2
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from train_pipeline import Stage  # the 1F1B stage (this directory)


class _AllReduce(torch.autograd.Function):
    """With ``forward``: the sum over the tensor-parallel group in the forward pass, the identity in
    the backward pass (Megatron-LM's g); without: the identity forward, the sum of the gradient
    backward (its f)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup, forward: bool) -> torch.Tensor:
        ctx.group, ctx.forward = group, forward
        if forward:
            x = x.clone()
            dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        if not ctx.forward:
            g = g.clone()
            dist.all_reduce(g, group=ctx.group)
        return g, None, None


class ParallelMLP(nn.Module):
    """Column-parallel linear, tanh, row-parallel linear, all-reduce (Megatron-LM's f and g)."""

    def __init__(self, width: int, tp: int, group: dist.ProcessGroup) -> None:
        super().__init__()
        self.group = group
        self.fc1 = nn.Linear(width, width // tp)
        self.fc2 = nn.Linear(width // tp, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _AllReduce.apply(x, self.group, False)  # f: identity forward, all-reduce backward
        return _AllReduce.apply(self.fc2(torch.tanh(self.fc1(x))), self.group, True)  # g


def make_groups(tp: int, pp: int, rank: int) -> tuple[dist.ProcessGroup, dist.ProcessGroup, list[int]]:
    """This rank's tensor-parallel group, its pipeline group and the pipeline's ranks."""
    tp_group = pipe = None
    pipe_ranks: list[int] = []
    for s in range(pp):
        ranks = [t + tp * s for t in range(tp)]
        g = dist.new_group(ranks, group_desc="tp")
        if rank in ranks:
            tp_group = g
    for t in range(tp):
        ranks = [t + tp * s for s in range(pp)]
        g = dist.new_group(ranks, group_desc="pp")
        if rank in ranks:
            pipe, pipe_ranks = g, ranks
    assert tp_group is not None and pipe is not None
    return tp_group, pipe, pipe_ranks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--mb-size", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="sleep before each forward of the last stage")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == args.tp * args.pp, f"world {world} != tp {args.tp} * pp {args.pp}"
    assert args.width % args.tp == 0, "--width must divide by --tp"
    tp_group, pipe, pipe_ranks = make_groups(args.tp, args.pp, rank)
    stage = rank // args.tp
    torch.manual_seed(rank)  # each tensor rank holds its own shard
    model = nn.Sequential(*[ParallelMLP(args.width, args.tp, tp_group) for _ in range(args.layers)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    # the inputs of a stage are the same on its tensor ranks
    st = Stage(args, model, stage, pipe_ranks, pipe, torch.Generator().manual_seed(1234 + stage))
    t0 = time.perf_counter()
    for step in range(args.steps):
        st.run_1f1b(args.pp, args.microbatches)
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
