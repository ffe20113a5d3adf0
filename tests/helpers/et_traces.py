"""A small 2-rank-style trace with every node kind, built in memory (ET tests and the CLI tests use it)."""

from __future__ import annotations

import polars as pl

from charllm_trace.core.model import ProcessGroup, Trace, TraceMeta

T0 = 1_700_000_000_123_456_789  # a Unix-epoch ns time with sub-µs digits


def small_trace(rank: int = 0, world: int = 2) -> Trace:
    """A hand-written rank trace: a CPU op launching an all_reduce and a send, plus telemetry."""
    nodes = pl.DataFrame(
        {
            "id": [1, 2, 3, 4],
            "name": [
                "ProfilerStep#1",
                "nccl:all_reduce",
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                "ncclDevKernel_SendRecv",
            ],
            "node_type": ["COMP", "COMP", "COMM_COLL", "COMM_SEND"],
            "kind": ["annotation", "cpu_op", "kernel", "kernel"],
            "on_gpu": [False, False, True, True],
            "tid": [11, 11, None, None],
            "device": [None, None, 0, 0],
            "stream": [None, None, 7, 9],
            "start_ns": [T0, T0 + 1_000, T0 + 5_555, T0 + 9_000],
            "dur_ns": [100_000, 2_000, 40_001, 499],
            "parent": [None, 1, None, None],
            "launch_id": [None, None, 2, 2],
            "coll_type": [None, None, "all_reduce", "send"],
            "comm_bytes": [None, None, 4 << 20, 1024],
            "dtype": [None, None, "Float", "Float"],
            "num_elems": [None, None, 1 << 20, 256],
            "pg_name": [None, None, "0", "0"],
            "coll_seq": [None, None, 1, 2],
            "peer": [None, None, None, 1 - rank],
            "attrs": [None, '{"Sequence number":5,"note":"ünïcode ✓"}', None, "{}"],
        }
    )
    deps = pl.DataFrame({"node": [2, 3, 4, 3], "dep": [1, 2, 2, 1], "kind": ["ctrl", "ctrl", "ctrl", "data"]})
    tel = pl.DataFrame(
        {
            "time_ns": [T0, T0 + 50_000_000],
            "device": [0, 0],
            "power_w": [310.5, 402.25],
            "energy_j": [1000.0, None],
            "temp_c": [61.0, 63.0],
        }
    )
    meta = TraceMeta(
        rank=rank,
        world_size=world,
        device_model="NVIDIA H100 80GB HBM3",
        device_index=rank,
        source="kineto",
        process_groups=(ProcessGroup("0", "default_pg", tuple(range(world))),),
    )
    return Trace(nodes=nodes, deps=deps, telemetry=tel, meta=meta)
