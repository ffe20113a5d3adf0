"""Write a valid single-rank GPU Kineto profile of about N complete events (a benchmark input for
the memory bound of huge profiles, docs/untrusted.md; not shipped data).

    python benchmarks/make_big_profile.py N OUT.json

Each step is a ``ProfilerStep#k`` annotation holding 100 launches: an ``aten::mm`` CPU op, its
``cudaLaunchKernel`` call and the GEMM kernel on stream 7 (every tenth launch an NCCL all-reduce
instead), so N events are about N / 301 steps. The file is written as it is generated (plain JSON,
about 270 bytes an event), so making a 10 M-event profile needs little memory.
"""

from __future__ import annotations

import sys
from pathlib import Path

T0 = 1_700_000_000_000_000  # µs
PER_STEP = 100  # launches per step: 3 events each, plus the step's annotation


def _step(k: int, corr: int) -> tuple[list[str], int]:
    s0 = T0 + k * 1_000_000
    out = [
        f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{k}","pid":10,"tid":10,'
        f'"ts":{s0},"dur":{PER_STEP * 9000},"args":{{"External id":{corr}}}}}'
    ]
    for j in range(PER_STEP):
        corr += 1
        t = s0 + j * 9000 + 10
        comm = j % 10 == 9
        op = "c10d::allreduce_" if comm else "aten::mm"
        kern = "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if comm else "ampere_sgemm_128x64_nn"
        extra = (
            ',"Collective name":"allreduce","In msg nelems":1048576,"Out msg nelems":1048576,'
            '"dtype":"Float","Group size":1,"Process Group Name":"0","Process Group Ranks":[0]'
            if comm
            else ""
        )
        out += [
            f'{{"ph":"X","cat":"cpu_op","name":"{op}","pid":10,"tid":10,"ts":{t},"dur":500,'
            f'"args":{{"External id":{corr}}}}}',
            f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":10,'
            f'"ts":{t + 100},"dur":50,"args":{{"External id":{corr},"correlation":{corr}}}}}',
            f'{{"ph":"X","cat":"kernel","name":"{kern}","pid":0,"tid":7,"ts":{t + 300},"dur":8000,'
            f'"args":{{"External id":{corr},"correlation":{corr},"device":0,"stream":7{extra}}}}}',
        ]
    return out, corr + 1


def write_profile(n_events: int, out: Path) -> int:
    """Write about ``n_events`` events to ``out``; returns how many were written."""
    steps = max(1, n_events // (3 * PER_STEP + 1))
    written, corr = 0, 1
    with open(out, "w") as f:
        f.write(
            '{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"NVIDIA H100 80GB HBM3",'
            '"totalGlobalMem":85000000000}],"distributedInfo":{"backend":"nccl","rank":0,"world_size":1},'
            '"baseTimeNanoseconds":0,"traceEvents":[\n'
            '{"ph":"M","name":"process_name","pid":10,"tid":0,"args":{"name":"python"}},\n'
            '{"ph":"M","name":"process_name","pid":0,"tid":0,"args":{"name":"GPU 0"}}'
        )
        for k in range(steps):
            evs, corr = _step(k + 1, corr)
            f.write(",\n" + ",\n".join(evs))
            written += len(evs)
        f.write("\n]}\n")
    return written


if __name__ == "__main__":
    n = write_profile(int(float(sys.argv[1])), Path(sys.argv[2]))
    print(f"{n:,} events -> {sys.argv[2]}")
