"""A device or stream synchronize waits for what was launched before it (``graph/sync_waits.py``),
whether or not that work was still running when the call began.

The real-GPU anomaly this guards (issue 22): in a CPU-bound step the ``cudaDeviceSynchronize`` of the
next step finds the GPU done and returns at once; when the sync edge was taken from "the op that
ended inside the call", there was none, and ``--what-if gemm=2`` let the CPU run on as if the GPU
could never hold it (-0.0 % on some steps, +37 % on others, by a few µs of timing luck)."""

from __future__ import annotations

import polars as pl

from charllm_trace.analysis.whatif import what_if
from charllm_trace.core.model import Run
from charllm_trace.graph import execution_deps
from tests.helpers.graph_traces import N, edge_set, mk_trace

GEMM = "volta_sgemm_128x64_nn"


def cpu_bound_steps():
    """Step 3 [0, 100] launches a 40 ns GEMM k1 [12, 52] and runs on; step 4 [100, 200] begins
    with a device synchronize [110, 113] (the GPU long done: its own 3 ns), then launches k2
    [127, 167]. Launch latency 7 ns, on an idle stream, both times."""
    return mk_trace(
        [
            N(1, "ProfilerStep#3", "annotation", 0, 100),
            N(2, "cudaLaunchKernel", "runtime", 5, 5, parent=1, corr=1),
            N(3, "ProfilerStep#4", "annotation", 100, 100),
            N(4, "cudaDeviceSynchronize", "runtime", 110, 3, parent=3),
            N(5, "cudaLaunchKernel", "runtime", 120, 5, parent=3, corr=2),
            N(10, GEMM, "kernel", 12, 40, gpu=True, stream=7, corr=1),
            N(11, GEMM, "kernel", 127, 40, gpu=True, stream=7, corr=2),
        ]
    )


def whole(res) -> tuple[int, int]:
    row = res.steps.filter(pl.col("step").is_null()).row(0, named=True)
    return row["measured_ns"], row["predicted_ns"]


def test_device_sync_that_found_the_gpu_idle_still_waits_for_it():
    got = edge_set(execution_deps(cpu_bound_steps()))
    assert (4, 10, "sync", True, True, None) in got


def test_slower_gemms_hold_the_cpu_at_the_next_sync():
    """gemm=4: k1 ends at 12 + 160 = 172, the synchronize 3 ns later (175), the CPU runs on 7 ns
    to k2's launch (182), k2 starts 7 ns after it (189) and ends 160 ns later: 349. (Without the
    edge the CPU did not wait: k2 would have ended at 127 + 160 = 287.)"""
    res = what_if(Run.single(cpu_bound_steps()), {"gemm": 4})
    assert whole(res) == (200, 349)
    # and at factor 1 nothing moves: the edge does not bind what was measured
    res1 = what_if(Run.single(cpu_bound_steps()), {"gemm": 1})
    assert (res1.steps["predicted_ns"] == res1.steps["measured_ns"]).all()


def test_stream_sync_waits_for_the_stream_its_thread_launched_on_last():
    """The thread launches ka on stream 7, then kb on stream 9, then synchronizes (``.item()``: a
    copy then a stream sync on that stream): it waits for kb, not for ka."""
    tr = mk_trace(
        [
            N(1, "cudaLaunchKernel", "runtime", 0, 5, corr=1),
            N(2, "cudaLaunchKernel", "runtime", 6, 5, corr=2),
            N(3, "cudaStreamSynchronize", "runtime", 200, 4),
            N(10, "ka", "kernel", 7, 100, gpu=True, stream=7, corr=1),
            N(11, "kb", "kernel", 13, 20, gpu=True, stream=9, corr=2),
        ]
    )
    sync = {e[:2] for e in edge_set(execution_deps(tr)) if e[2] == "sync"}
    assert sync == {(3, 11)}
