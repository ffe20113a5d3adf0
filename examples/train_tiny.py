"""A tiny GPT-style language model trained with DDP over gloo on CPU.

Besides the gradient all-reduces that DDP issues, every step runs four explicit
collectives of known sizes, so a collected trace has one of each to check:

- ``all_gather``      : each rank contributes ``--coll-elems`` float32 elements;
- ``reduce_scatter``  : each rank contributes ``world * --coll-elems`` elements and keeps ``--coll-elems``;
- ``broadcast``       : ``--coll-elems`` elements from rank 0;
- ``all_to_all``      : ``--coll-elems`` elements split evenly across ranks.

Run it plainly (``torchrun --nproc_per_node 2 examples/train_tiny.py``) or under
``charllm-trace collect``; the script knows nothing about the collector.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interventions import Switches, add_arguments  # noqa: E402


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        mask = torch.triu(torch.full((seq, seq), -math.inf), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for b in self.blocks:
            x = b(x, self.mask[: idx.shape[1], : idx.shape[1]])
        return self.head(self.ln(x))


# torch >= 2.12 renamed the single-tensor forms; older versions have the *_tensor names.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def explicit_collectives(n: int, rank: int, world: int) -> None:
    """One all_gather, reduce_scatter, broadcast and all_to_all of known sizes (float32)."""
    with torch.profiler.record_function("explicit_collectives"):
        x = torch.full((n,), float(rank))
        gathered = torch.empty(world * n)
        _all_gather(gathered, x)
        src = torch.arange(world * n, dtype=torch.float32)
        part = torch.empty(n)
        _reduce_scatter(part, src)
        b = torch.full((n,), float(rank))
        dist.broadcast(b, src=0)
        out = torch.empty(n)
        dist.all_to_all_single(out, x)
        # Check the results, so a broken collective cannot go unnoticed.
        assert torch.equal(gathered.view(world, n)[:, 0], torch.arange(world, dtype=torch.float32))
        assert part[0].item() == world * float(rank * n)
        assert b[0].item() == 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument(
        "--coll-elems", type=int, default=1024, help="elements per rank in the explicit collectives"
    )
    ap.add_argument("--step-times", default=None, help="rank 0 writes each step's wall time (s) to this JSON file")
    add_arguments(ap)
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(TinyGPT(args.vocab, args.d_model, args.heads, args.layers, args.seq))
    sw = Switches(args, rank, world)
    if sw.enabled:
        model.register_comm_hook(None, sw.ddp_hook)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1234 + rank)
    t0 = time.perf_counter()
    times = []
    with sw.installed():
        for step in range(args.steps):
            sw.start_step(step)
            ts = time.perf_counter()
            idx = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen)
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), idx[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for _ in range(sw.comm_repeats()):
                explicit_collectives(args.coll_elems, rank, world)
            opt.step()
            times.append(time.perf_counter() - ts)
            sw.end_step(step, times[-1])
            if rank == 0 and (step < 10 or step % 100 == 0):
                print(f"step {step} loss {loss.item():.4f}", flush=True)
    sw.write_log()
    if rank == 0:
        print(f"done: {args.steps} steps in {time.perf_counter() - t0:.2f} s", flush=True)
        if args.step_times:
            with open(args.step_times, "w") as f:
                json.dump(times, f)
    # An orderly gloo shutdown: all ranks arrive, DDP (which holds the process group) goes first.
    # Destroying the group while DDP still referenced it aborted a rank at exit ("terminate called
    # without an active exception") in about 1 run of 6 on this CPU machine, with or without tracing.
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
