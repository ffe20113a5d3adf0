"""Collective naming, element sizes and the nccl-tests byte convention, on the spellings that
NCCL, RCCL, torch.distributed and the host ET use."""

from __future__ import annotations

import pytest

from charllm_trace.converters import collectives as C


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce_scatter"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "broadcast"),
        ("ncclKernel_Reduce_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)", "reduce"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None),
        ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", None),  # RCCL: type from context
        ("allreduce", "all_reduce"),
        ("allreduce_coalesced", "all_reduce"),
        ("_allgather_base", "all_gather"),
        ("all_gather_into_tensor_coalesced", "all_gather"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("alltoall_base", "all_to_all"),
        ("all_to_all", "all_to_all"),
        ("send", "send"),
        ("recv", "recv"),
        ("recvAnySource", "recv"),
        ("barrier", "barrier"),
        ("gather", "gather"),
        ("scatter", "scatter"),
        ("c10d::allreduce_", "all_reduce"),
        ("c10d::_reduce_scatter_base_", "reduce_scatter"),
        ("c10d::alltoall_base_", "all_to_all"),
        ("c10d::recv_", "recv"),
        ("c10d::send", "send"),
        ("nccl:all_to_all", "all_to_all"),
        ("nccl:_all_gather_base", "all_gather"),
        ("gloo:barrier", "barrier"),
        ("gloo:broadcast", "broadcast"),
        ("c10d::wait", None),
        ("aten::add", None),
        (None, None),
    ],
)
def test_collective_type_names(text: str | None, want: str | None) -> None:
    assert C.coll_type_of(text) == want


@pytest.mark.parametrize(
    ("raw", "name", "size"),
    [
        ("Float", "float32", 4),
        ("BFloat16", "bfloat16", 2),
        ("Half", "float16", 2),
        ("Long", "int64", 8),
        ("Int", "int32", 4),
        ("Byte", "uint8", 1),
        ("Char", "int8", 1),
        ("Double", "float64", 8),
        ("float", "float32", 4),
        ("long int", "int64", 8),
        ("signed char", "int8", 1),
        ("c10::BFloat16", "bfloat16", 2),
        ("Tensor(float)", "float32", 4),
        ("Tensor(c10::Half)", "float16", 2),
        ("Tensor(long int)", "int64", 8),
        ("Float8_e4m3fn", "Float8_e4m3fn", 1),
    ],
)
def test_dtype_spellings(raw: str, name: str, size: int) -> None:
    assert C.dtype_info(raw) == (name, size)


def test_nccl_tests_message_size_convention() -> None:
    # a group of 4 ranks; per-rank 100 elements in, as each collective's args would say
    assert C.comm_nelems("all_reduce", 100, 100) == 100
    assert C.comm_nelems("broadcast", 100, 100) == 100
    assert C.comm_nelems("all_gather", 100, 400) == 400  # whole output
    assert C.comm_nelems("reduce_scatter", 400, 100) == 400  # whole input
    assert C.comm_nelems("all_to_all", 400, 400) == 400  # everything one rank sends
    assert C.comm_nelems("send", 100, None) == 100
    assert C.comm_nelems("recv", None, 100) == 100
    assert C.comm_nelems("barrier", 1, 1) == 0
    got = C.from_args(
        {
            "Collective name": "_allgather_base",
            "In msg nelems": 256,
            "Out msg nelems": 1024,
            "dtype": "BFloat16",
            "Group size": 4,
            "Process Group Name": "3",
            "Process Group Description": "tp",
            "Process Group Ranks": "[4, 5, 6, 7]",
            "In split size": "[]",
            "Out split size": "[]",
            "Seq": 17,
        },
        None,
    )
    assert (got["coll_type"], got["num_elems"], got["comm_bytes"], got["dtype"]) == (
        "all_gather",
        1024,
        2048,
        "bfloat16",
    )
    assert (got["pg_name"], got["pg_desc"], got["pg_ranks"], got["group_size"], got["coll_seq"]) == (
        "3",
        "tp",
        [4, 5, 6, 7],
        4,
        17,
    )
    got = C.from_args(
        {
            "Collective name": "all_to_allv",
            "In msg nelems": 30,
            "Out msg nelems": 50,
            "dtype": "Float",
            "In split size": "[10, 20]",
            "Out split size": "[25, 25]",
        },
        None,
    )
    assert (got["coll_type"], got["comm_bytes"], got["in_split"], got["out_split"]) == (
        "all_to_all",
        120,
        [10, 20],
        [25, 25],
    )


def test_first_tensor_counts_lists_of_tensors() -> None:
    # c10d::allgather_(Tensor[][] output_tensors, Tensor[] input_tensors, ...): host-ET shapes
    shapes = [[[[256], [256]]], [[256]], [], [], []]
    types = [
        "GenericList[GenericList[Tensor(float),Tensor(float)]]",
        "GenericList[Tensor(float)]",
        "Object",
        "Bool",
        "Int",
    ]
    assert C.first_tensor(shapes, types) == (512, "float")
    assert C.first_tensor([[], [[3, 4]]], ["Scalar", "float"]) == (12, "float")
    assert C.first_tensor([[], []], ["", ""]) == (None, None)


def test_group_ranks_from_start_and_stride() -> None:
    got = C.from_args(
        {
            "Collective name": "allreduce",
            "In msg nelems": 8,
            "Out msg nelems": 8,
            "dtype": "Float",
            "Group size": 4,
            "Global rank start": 2,
            "Global rank stride": 8,
        },
        None,
    )
    assert got["pg_ranks"] == [2, 10, 18, 26]
