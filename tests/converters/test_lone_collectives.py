"""converters/lone_collectives.py: which device operations carry a collective that has no
library kernel (the real case, NCCL on one rank, is checked on the H200 fixture)."""

from __future__ import annotations

import numpy as np
import polars as pl

from charllm_trace.converters.lone_collectives import context_key, lone_device_work

# id: (name, kind, on_gpu, start_ns, dur_ns, _rt_id)
ROWS = {
    0: ("record_param_comms", "cpu_op", False, 0, 100, None),  # collective A
    1: ("cudaMemcpyAsync", "runtime", False, 10, 5, None),
    2: ("Memcpy DtoD (Device -> Device)", "memcpy", True, 20, 50, 1),  # A's only device work
    3: ("record_param_comms", "cpu_op", False, 200, 100, None),  # collective B: two device ops
    4: ("cudaMemcpyAsync", "runtime", False, 210, 5, None),
    5: ("cudaLaunchKernel", "runtime", False, 220, 5, None),
    6: ("Memcpy DtoD (Device -> Device)", "memcpy", True, 230, 10, 4),
    7: ("void scale_kernel<float>()", "kernel", True, 240, 10, 5),
    8: ("nccl:all_reduce", "user_annotation", False, 400, 100, None),  # collective C: has an NCCL kernel
    9: ("cudaMemcpyAsync", "runtime", False, 410, 5, None),
    10: ("Memcpy DtoD (Device -> Device)", "memcpy", True, 420, 10, 9),
    11: ("cudaMemcpyAsync", "runtime", False, 600, 5, None),  # outside every collective
    12: ("Memcpy HtoD (Pageable -> Device)", "memcpy", True, 610, 10, 11),
    13: ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", True, 430, 10, None),
}
CONTEXT = {1: 0, 4: 3, 5: 3, 9: 8}  # runtime launch -> its collective (ann for C, rpc otherwise)


def _ev() -> pl.DataFrame:
    ids = sorted(ROWS)
    cols = list(zip(*(ROWS[i] for i in ids), strict=True))
    return pl.DataFrame(
        {"id": ids, "name": cols[0], "kind": cols[1], "on_gpu": cols[2], "start_ns": cols[3],
         "dur_ns": cols[4], "_rt_id": cols[5], "tid": [1] * len(ids)},
        schema_overrides={"_rt_id": pl.Int64},
    )  # fmt: skip


def _contexts(starts: np.ndarray) -> list[np.ndarray]:
    ctx = np.array([CONTEXT.get(int(s), -1) for s in starts], dtype=np.int64)
    ann = np.where(ctx == 8, ctx, -1)
    rpc = np.where(ctx != 8, ctx, -1)
    return [rpc, ann, np.full(len(starts), -1, dtype=np.int64)]


def test_only_the_single_device_op_of_a_collective_without_library_kernel() -> None:
    taken = context_key(_contexts(np.array([9])))  # the NCCL kernel 13 was launched by 9's context
    rows, ctx, several = lone_device_work(_ev(), np.array([13]), taken, _contexts)
    assert rows["id"].to_list() == [2]
    assert context_key(ctx).tolist() == [0]
    assert several == 1  # collective B launched two device operations: left alone


def test_no_collective_context_means_nothing_to_do() -> None:
    ev = _ev().filter(~pl.col("name").is_in(["record_param_comms", "nccl:all_reduce"]))
    rows, _, several = lone_device_work(ev, np.array([13]), np.array([], dtype=np.int64), _contexts)
    assert rows.height == 0 and several == 0


def test_context_key_prefers_the_annotation() -> None:
    rpc, ann, c10d = np.array([5, -1, -1, -1]), np.array([7, 7, -1, -1]), np.array([9, 9, 9, -1])
    assert context_key([rpc, ann, c10d]).tolist() == [7, 7, 9, -1]
