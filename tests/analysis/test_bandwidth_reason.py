"""The bandwidth section names what is actually missing (issue 27 item 6): an accelerator profile
whose collectives are CPU-side ``c10d::`` calls without device activity is not "a host
execution trace alone"."""

from __future__ import annotations

from charllm_trace.analysis import AnalyzeOptions, analyze_trace
from tests.helpers.analysis_helpers import cpu, kernel, make_trace

US = 1_000


def _profile(with_durations: bool = True):  # noqa: ANN202
    """A device kernel, and CPU-side c10d collectives (3 allgather_, 2 barrier, 1 allreduce_)
    with no device-side collective (the MTIA profile's shape, 146 such ops there)."""
    rows = [
        cpu(1, "aten::mm", 0, 50 * US),
        cpu(2, "cudaLaunchKernel", 10 * US, 5 * US, kind="runtime", parent=1, correlation=1),
        kernel(3, "gemm", 20 * US, 30 * US, correlation=1),
    ]
    names = ["c10d::allgather_"] * 3 + ["c10d::barrier"] * 2 + ["c10d::allreduce_"]
    for i, name in enumerate(names):
        dur = 10 * US if with_durations else None
        rows.append(cpu(10 + i, name, 100 * US + 20 * US * i, dur))
        rows[-1]["node_type"] = "COMM_COLL"
    return make_trace(rows, device_model="NVIDIA H100 80GB HBM3")


def test_cpu_side_collectives_without_device_activity_say_so() -> None:
    res = analyze_trace(_profile(), AnalyzeOptions(critical_path=False))
    why = res.skipped["bandwidth"]
    assert why.startswith(
        "6 collectives (3 c10d::allgather_, 2 c10d::barrier, 1 c10d::allreduce_) are CPU-side"
    )
    assert "ran work but no recorded collective kernel" in why and "host execution trace" not in why


def test_collectives_without_durations_still_point_at_the_host_et() -> None:
    res = analyze_trace(_profile(with_durations=False), AnalyzeOptions(critical_path=False))
    assert "a host execution trace alone records none" in res.skipped["bandwidth"]
