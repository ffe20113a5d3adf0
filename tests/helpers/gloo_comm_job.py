"""A 2-rank gloo job on CPU for the converter tests (run under torchrun by test_convert_gloo.py).

Each rank records a host execution trace and a Kineto profile of two steps doing
all_reduce, all_gather, all_gather_into_tensor, broadcast, all_to_all_single,
reduce_scatter_tensor, send/recv and barrier, and writes them as a run directory:
rank-<N>.host_et.json and rank-<N>.kineto.json in the directory given as argv[1].
The sizes used are written to sizes.json so the test checks against them.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

N_AR, N_AG, N_AGT, N_BC, N_A2A, N_RS, N_P2P = 1000, 256, 512, 300, 64, 128, 100


def step(r: int, w: int) -> None:
    t = torch.arange(N_AR, dtype=torch.float32) + r
    dist.all_reduce(t)
    outs = [torch.empty(N_AG, dtype=torch.float32) for _ in range(w)]
    dist.all_gather(outs, torch.ones(N_AG))
    o = torch.empty(N_AGT * w, dtype=torch.float64)
    dist.all_gather_into_tensor(o, torch.ones(N_AGT, dtype=torch.float64))
    b = torch.ones(N_BC, dtype=torch.int64)
    dist.broadcast(b, src=1)
    # uneven all-to-all: every rank sends N_A2A - 8 elements to rank 0 and N_A2A + 8 to rank 1 (w == 2)
    in_split = [N_A2A - 8, N_A2A + 8]
    out_split = [in_split[r]] * w
    a_out = torch.empty(sum(out_split))
    dist.all_to_all_single(
        a_out, torch.ones(sum(in_split)), output_split_sizes=out_split, input_split_sizes=in_split
    )
    rs = torch.empty(N_RS)
    dist.reduce_scatter_tensor(rs, torch.ones(N_RS * w))
    if r == 0:
        dist.send(torch.ones(N_P2P), dst=1)
    else:
        dist.recv(torch.empty(N_P2P), src=0)
    dist.barrier()


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    r, w = dist.get_rank(), dist.get_world_size()
    et = ExecutionTraceObserver()
    et.register_callback(os.path.join(out, f"rank-{r}.host_et.json"))
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=0, active=2, repeat=1),
        execution_trace_observer=et,
    ) as p:
        for _ in range(2):
            step(r, w)
            p.step()
    p.export_chrome_trace(os.path.join(out, f"rank-{r}.kineto.json"))
    if r == 0:
        sizes = dict(
            all_reduce=N_AR,
            all_gather=N_AG,
            all_gather_tensor=N_AGT,
            broadcast=N_BC,
            all_to_all=N_A2A,
            reduce_scatter=N_RS,
            p2p=N_P2P,
            world=w,
        )
        with open(os.path.join(out, "sizes.json"), "w") as fh:
            json.dump(sizes, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
