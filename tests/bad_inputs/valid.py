"""Small valid inputs the bad ones are made from."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

FIXTURE_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"
FIXTURE_BASELINE = FIXTURE_RUN.parent / "cpu-2rank-gloo.baseline.json"

T0 = 1_700_000_000_000_000  # µs


def kineto_doc(rank: int = 0, world: int = 2) -> dict[str, Any]:
    """A GPU Kineto profile of two steps: a GEMM launched by aten::mm and an NCCL all_reduce."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    corr = 100
    for step in range(2):
        s0 = T0 + step * 10_000
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step + 1}",
                "pid": 10,
                "tid": 10,
                "ts": s0,
                "dur": 9_000,
                "args": {"External id": corr},
            }
        )
        for k, (op, kern, dur) in enumerate(
            [
                ("aten::mm", "ampere_sgemm_128x64_nn", 3_000),
                ("c10d::allreduce_", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 2_000),
            ]
        ):
            t = s0 + 100 + k * 4_000
            corr += 1
            ev.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": op,
                    "pid": 10,
                    "tid": 10,
                    "ts": t,
                    "dur": 500,
                    "args": {"External id": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 10,
                    "tid": 10,
                    "ts": t + 100,
                    "dur": 50,
                    "args": {"External id": corr, "correlation": corr},
                }
            )
            args: dict[str, Any] = {"External id": corr, "correlation": corr, "device": 0, "stream": 7}
            if "nccl" in kern:
                args.update(
                    {
                        "Collective name": "allreduce",
                        "In msg nelems": 1 << 20,
                        "Out msg nelems": 1 << 20,
                        "dtype": "Float",
                        "Group size": world,
                        "Process Group Name": "0",
                        "Process Group Ranks": list(range(world)),
                    }
                )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kern,
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 300,
                    "dur": dur,
                    "args": args,
                }
            )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85e9}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "baseTimeNanoseconds": 0,
        "traceEvents": ev,
    }


def dump(path: Path, doc: Any) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


def kineto(tmp: Path, name: str = "rank-0.json", doc: dict[str, Any] | None = None) -> Path:
    return dump(tmp / name, kineto_doc() if doc is None else doc)


def et(tmp: Path, name: str = "rank-0.et") -> Path:
    from charllm_trace.et.writer import write_et
    from tests.helpers.et_traces import small_trace

    p = tmp / name
    write_et(small_trace(), p)
    return p


def run_dir(tmp: Path, name: str = "run") -> Path:
    """A copy of the collected 2-rank gloo run (tests/fixtures)."""
    out = tmp / name
    shutil.copytree(FIXTURE_RUN, out)
    return out


def load(path: Path) -> Any:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
