"""Inference / serving profiles (issue 24): a decode profile built here, shaped as an SGLang one is
(decode batches, GEMMs launched outside every ``ProfilerStep``)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tests.conftest import invoke
from tests.kineto_builder import x as _x

BF = ["c10::BFloat16", "c10::BFloat16"]


def _gemm(ev: list, ts: float, corr: int, m: int = 32) -> None:
    """An ``aten::mm`` [m, 4096] x [4096, 4096] at ``ts`` µs, its launch and its 20 µs kernel."""
    ev.append(_x("aten::mm", "cpu_op", ts, 8, **{"Input Dims": [[m, 4096], [4096, 4096]], "Input type": BF}))
    ev.append(_x("cudaLaunchKernel", "cuda_runtime", ts + 1, 5, correlation=corr))
    ev.append(
        _x("sm90_gemm_bf16", "kernel", ts + 10, 20, pid=0, tid=7, device=0, stream=7, correlation=corr)
    )


def _decode_doc(n_gemm: int = 4) -> dict:
    """GEMMs of decode batches, then one ``ProfilerStep`` holding only an elementwise op."""
    ev: list = []
    for i in range(n_gemm):
        _gemm(ev, 100 * i, i + 1)
    t = 100 * n_gemm
    ev.append(_x("ProfilerStep#7", "user_annotation", t, 50))
    ev.append(_x("aten::add", "cpu_op", t + 5, 5))
    ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 6, 3, correlation=999))
    ev.append(_x("elementwise_kernel", "kernel", t + 12, 4, pid=0, tid=7, device=0, stream=7, correlation=999))
    return {
        "traceEvents": ev,
        "distributedInfo": {"rank": 0, "world_size": 1},
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
    }


def test_per_step_with_no_flop_op_in_any_step(tmp_path: Path) -> None:
    """Was exit 3 (ShapeError in analysis/flops.py): FLOP rows for the whole trace, none per step."""
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(_decode_doc()))
    r = invoke("analyze", str(p), "--per-step")
    assert r.exit_code == 0, r.output
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.converters.build import kineto_trace
    from charllm_trace.converters.kineto import read_kineto
    from charllm_trace.model import Run

    trace, _ = kineto_trace(read_kineto(p))
    res = analyze_run(Run.single(trace), AnalyzeOptions(per_step=True, critical_path=False))
    f = res.flops.per_step
    whole = f.filter(pl.col("step").is_null() & (pl.col("op_class") == "gemm")).row(0, named=True)
    assert whole["flop"] == 4 * 2 * 32 * 4096 * 4096 and whole["kernel_ns"] == 4 * 20_000
    assert f.filter(pl.col("step").is_not_null()).height == 0
    assert any("no GEMM, attention or convolution op falls in a step" in n for n in res.flops.notes)
