"""Kineto profiles of a simulated schedule (``tests.schedgen``), as CUDA, ROCm or another
accelerator writes them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.schedgen.sim import T_BASE_NS, Schedule

DEVICE_NAME = {"cuda": "NVIDIA H200", "hip": "AMD Instinct MI300X", "device": "MTIA"}


def keep(e: dict, flavour: str) -> bool:
    return flavour != "device" or e["cat"] != "cuda_sync"


def flavoured(e: dict, flavour: str) -> dict:
    """Event ``e`` (written for CUDA) as the accelerator ``flavour`` writes it."""
    if flavour == "cuda":
        return e
    e = dict(e)
    if flavour == "hip":
        if e["cat"] == "cuda_runtime":
            e["name"] = e["name"].replace("cuda", "hip", 1)
        return e
    if e["cat"] == "cuda_runtime":
        e["cat"], e["name"] = "mtia_runtime", e["name"].replace("cuda", "mtia", 1)
    elif e["cat"] in ("kernel", "gpu_memcpy"):
        e["cat"] = "mtia_ccp_events"
    return e


def write(sched: Schedule, out: Path, flavour: str = "cuda") -> list[Path]:
    """One Kineto profile per rank in ``out`` (``rank-R.json``). ``flavour``: ``cuda``; ``hip``
    (ROCm: ``hip…`` runtime calls under ``cuda_runtime``, as PyTorch on AMD writes them);
    ``device`` (an accelerator of its own: runtime calls under ``mtia_runtime`` named
    ``mtia…``, device ops under a category the converter does not list, ``mtia_ccp_events``,
    with ``args.device`` and ``args.stream``; no CUPTI sync records)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    world = len(sched.ranks)
    for rk in sched.ranks:
        doc = {
            "schemaVersion": 1,
            "baseTimeNanoseconds": T_BASE_NS,
            "deviceProperties": [{"id": 0, "name": DEVICE_NAME[flavour], "totalGlobalMem": 150_000_000_000}],
            "distributedInfo": {
                "backend": "nccl",
                "rank": rk.rank,
                "world_size": world,
                "pg_count": 1,
                "pg_config": [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": "cuda:nccl",
                        "pg_size": world,
                        "ranks": list(range(world)),
                    }
                ],
            },  # fmt: skip
            "traceEvents": sorted(
                (flavoured(e, flavour) for e in rk.events if keep(e, flavour)), key=lambda e: e["ts"]
            ),
        }
        p = out / f"rank-{rk.rank}.json"
        p.write_text(json.dumps(doc))
        paths.append(p)
    return paths
