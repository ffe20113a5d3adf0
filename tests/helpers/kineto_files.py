"""The shared Kineto profiles every Kineto reader is checked on."""

from __future__ import annotations

KINETO_FILES = [
    "hta/a100_ddp_nccl_rank0.json.gz",
    "hta/trace_filter_2ranks/rank-0.json.gz",
    "hta/trace_filter_2ranks/rank-1.json.gz",
    "hta/mi250_minitoy_kineto.json.gz",
    "hta/simple_add_kineto.json.gz",
    "param/resnet_kineto.json.gz",
    "param/dlrm_8ranks_v100/kineto_rank3.json.gz",
    "tracelens/h100_qwen1.5-0.5b_inference.json.gz",
    "tracelens/mi300_qwen1.5-0.5b_inference.json.gz",
]
