"""A warning when kernel-launch calls vastly outnumber GPU kernels (issue 13, item 5).

A profile with 546 kernel-launch calls and 2 GPU kernels was analysed as an 11 µs GPU span with no
warning. The profile is built here with that shape.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from charllm_trace.analysis import analyze_run
from charllm_trace.core.model import Run
from charllm_trace.et.summary import run_summary
from charllm_trace.render.info import render_info
from tests.helpers.kineto_builder import trace_of
from tests.helpers.kineto_builder import x as _x

WARNING = "the profile lost device activity: 546 kernel-launch calls, 2 GPU kernels; GPU times cover only the kernels recorded"


def _doc(
    launches: int, kernels: int, launch: str = "cudaLaunchKernel", runtime: str = "cuda_runtime"
) -> dict:
    ev = [_x("ProfilerStep#1", "user_annotation", 0, 20 * launches + 100)]
    for i in range(launches):
        ev.append(_x("aten::add", "cpu_op", 20 * i, 10))
        ev.append(_x(launch, runtime, 20 * i + 2, 5, correlation=i + 1))
        if i < kernels:
            ev.append(
                _x(
                    f"elementwise_kernel_{i}",
                    "kernel",
                    20 * i + 6,
                    5.5,
                    pid=0,
                    tid=7,
                    device=0,
                    stream=7,
                    correlation=i + 1,
                )
            )
    # a graph launch starts many kernels: not counted as a launch call
    ev.append(_x("cudaGraphLaunch", runtime, 20 * launches + 50, 5, correlation=10**6))
    return {"traceEvents": ev, "distributedInfo": {"rank": 0, "world_size": 1}}


def _trace(tmp_path: Path, doc: dict):
    return trace_of(tmp_path / "rank0.json", doc)


@pytest.mark.parametrize(
    ("launch", "runtime"),
    [
        ("cudaLaunchKernel", "cuda_runtime"),
        ("cudaLaunchKernelExC_v11060", "cuda_runtime"),
        ("cuLaunchKernel", "cuda_driver"),
        ("hipLaunchKernel", "cuda_runtime"),
        ("hipExtModuleLaunchKernel", "cuda_runtime"),
        ("urEnqueueKernelLaunch", "xpu_runtime"),
    ],
)
def test_lost_device_activity_is_said_in_analyze_and_info(tmp_path: Path, launch: str, runtime: str) -> None:
    t = _trace(tmp_path, _doc(546, 2, launch, runtime))
    res = analyze_run(Run.single(t))
    assert res.overlap is not None and res.overlap.notes[0] == WARNING
    assert res.overlap.per_rank["busy_ns"][0] == 11_000  # the 11 µs GPU span of the two kernels
    summary = run_summary(Run.single(t))
    assert summary["notes"] == [WARNING]
    buf = io.StringIO()
    render_info(summary, Console(file=buf, width=250))
    assert f"warning: {WARNING}" in buf.getvalue()


def test_launch_counts(tmp_path: Path) -> None:
    from charllm_trace.core.launch_gap import launch_counts

    assert launch_counts(_trace(tmp_path, _doc(546, 2)).nodes) == (546, 2)  # the graph launch not counted


def test_no_warning_when_the_kernels_are_there(tmp_path: Path) -> None:
    t = _trace(tmp_path, _doc(546, 546))
    res = analyze_run(Run.single(t))
    assert res.overlap is not None and not any("lost device activity" in n for n in res.overlap.notes)
    assert run_summary(Run.single(t))["notes"] == []


def test_a_short_profile_does_not_warn(tmp_path: Path) -> None:
    t = _trace(tmp_path, _doc(40, 0))
    assert run_summary(Run.single(t))["notes"] == []
