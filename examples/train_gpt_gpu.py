"""A small GPT-style language model trained in bf16 on NVIDIA GPUs over NCCL.

The GPU counterpart of ``train_tiny.py`` (which runs on CPU over gloo). Data parallel by hand,
as ZeRO-1 does it, so that the collectives are the ones a real run issues and run on any world
size, one included (on a single rank NCCL 2.28 runs the all_reduce as its ``oneRankReduce`` kernel and the
all_gather as a device-to-device copy, both inside the collective's ``nccl:`` range):

- ``all_reduce``  : the mean of the gradients (``ReduceOp.AVG``), flattened into buckets of
  ``--bucket-mb`` MB (bf16), each launched asynchronously as soon as backward has produced its
  gradients, as DDP does, so communication overlaps backward (``--no-overlap``: after backward);
- ``all_gather``  : every step, each rank's shard of the flattened parameters (bf16).

Run it plainly (``torchrun --nproc_per_node 1 examples/train_gpt_gpu.py``) or under
``charllm-trace collect``; the script knows nothing about the collector. With the defaults the
model has 268 M parameters (537 MB of bf16 weights): d_model 2048, 4 layers, vocabulary 16,384,
32 sequences of 2,048 tokens per step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interventions import Switches, add_arguments  # noqa: E402


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


# torch >= 2.12 renamed the single-tensor form; older versions have the *_into_tensor name.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class BucketReducer:
    """All-reduce the gradients in buckets of about ``bucket_bytes``, as DDP does.

    Parameters are put into buckets in reverse order (backward produces the last layers'
    gradients first). With ``overlap`` a bucket is reduced asynchronously, on the communication
    stream, as soon as its last gradient is accumulated, so communication overlaps the rest of
    backward; without it every bucket is reduced after backward. ``finish`` waits and copies the
    means back. NCCL reduces with ``ReduceOp.AVG`` (scaled inside the collective, as FSDP and
    ZeRO do; on one rank NCCL launches its oneRankReduce kernel, where an in-place sum would launch
    nothing); gloo, which has no AVG, sums and divides.
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        bucket_bytes: int,
        world: int,
        overlap: bool,
        switches: Switches | None = None,
    ) -> None:
        self.world = world
        self.switches = switches
        self.avg = dist.get_backend() == "nccl"
        self.buckets: list[list[nn.Parameter]] = [[]]
        size = 0
        for p in reversed(params):
            if size >= bucket_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.bucket_of = {id(p): k for k, b in enumerate(self.buckets) for p in b}
        self.left = [len(b) for b in self.buckets]
        self.pending: list[tuple[object, torch.Tensor, list[nn.Parameter]]] = []
        self.overlap = overlap
        if overlap:
            for p in params:
                p.register_post_accumulate_grad_hook(self._ready)

    def _ready(self, p: nn.Parameter) -> None:
        k = self.bucket_of[id(p)]
        self.left[k] -= 1
        if self.left[k] == 0:
            self._launch(self.buckets[k])

    def _launch(self, bucket: list[nn.Parameter]) -> None:
        flat = torch.cat([q.grad.reshape(-1) for q in bucket])
        op = dist.ReduceOp.AVG if self.avg else dist.ReduceOp.SUM
        if self.switches is not None:  # intervention: extra all-reduces of the same size first
            self.pending.extend((w, None, []) for w in self.switches.extra_allreduces(flat, op))
        self.pending.append((dist.all_reduce(flat, op=op, async_op=True), flat, bucket))

    def finish(self) -> None:
        if not self.overlap:
            for b in self.buckets:
                self._launch(b)
        for work, flat, bucket in self.pending:
            work.wait()
            if flat is None:
                continue
            if not self.avg:
                flat.div_(self.world)
            off = 0
            for q in bucket:
                n = q.numel()
                q.grad.copy_(flat[off : off + n].view_as(q))
                off += n
        self.pending.clear()
        self.left = [len(b) for b in self.buckets]


def gather_parameters(params: list[torch.nn.Parameter], rank: int, world: int, repeats: int = 1) -> int:
    """All-gather each rank's shard of the flattened parameters (as ZeRO-1 does after its update);
    returns the bytes each rank contributed."""
    with torch.no_grad():
        flat = torch.cat([p.reshape(-1) for p in params])
        shard = (flat.numel() + world - 1) // world
        flat = F.pad(flat, (0, shard * world - flat.numel()))
        out = torch.empty_like(flat)
        for _ in range(repeats):  # an intervention repeats the collective
            _all_gather(out, flat[rank * shard : (rank + 1) * shard].contiguous())
        off = 0
        for p in params:
            n = p.numel()
            p.copy_(out[off : off + n].view_as(p))
            off += n
    return shard * flat.element_size()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--bucket-mb", type=float, default=100.0, help="gradient all-reduce bucket size (MB)")
    ap.add_argument("--no-overlap", action="store_true", help="reduce every bucket after backward")
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU, float32 (a smoke test of the script)")
    ap.add_argument(
        "--step-times", default=None, help="rank 0 writes each step's wall time (s) to this JSON file"
    )
    add_arguments(ap)
    args = ap.parse_args()

    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.cpu:
        dev, dtype = torch.device("cpu"), torch.float32
    else:
        dev, dtype = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))), torch.bfloat16
        torch.cuda.set_device(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda d: None)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d_model, args.heads, args.layers, args.seq).to(dev, dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    sw = Switches(args, rank, world)
    reducer = BucketReducer(
        params,
        int(args.bucket_mb * 1e6),
        world,
        overlap=not args.no_overlap,
        switches=sw if sw.enabled else None,
    )
    opt = torch.optim.AdamW(params, lr=1e-4, fused=dev.type == "cuda")
    gen = torch.Generator(device=dev).manual_seed(1234 + rank)
    if rank == 0:
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
        print(f"{n_params / 1e6:.1f} M parameters, {params[0].element_size() * n_params / 1e6:.0f} MB of weights, "
              f"world {world}, {len(reducer.buckets)} gradient buckets, {name}", flush=True)  # fmt: skip
    times = []
    with sw.installed():
        for step in range(args.steps):
            sync(dev)
            sw.start_step(step)
            ts = time.perf_counter()
            idx = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen, device=dev)
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), idx[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            reducer.finish()
            opt.step()
            gather_parameters(params, rank, world, sw.comm_repeats())
            sync(dev)
            times.append(time.perf_counter() - ts)
            sw.end_step(step, times[-1])
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} {times[-1] * 1e3:.1f} ms", flush=True)
    sw.write_log()
    if rank == 0 and args.step_times:
        with open(args.step_times, "w") as f:
            json.dump(times, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
