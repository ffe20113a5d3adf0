"""Profiles that lost their device activity: many kernel launches, few kernels.

Every kernel-launch runtime call (``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cuLaunchKernel``,
``hipLaunchKernel``, ``hipExtModuleLaunchKernel``, ``hipModuleLaunchKernel``, XPU's
``zeCommandListAppendLaunchKernel`` / ``urEnqueueKernelLaunch`` ...) starts one
kernel. When the calls outnumber the recorded kernels many times over (a profile with 546 launch
calls held 2 kernels: CUPTI's activity buffers were dropped or the device tracing was off), the
GPU time any analysis reports covers only the few kernels that were recorded, and the figures look
plausible. :func:`lost_device_activity` says so. CUDA graph launches (``cudaGraphLaunch``) start
many kernels each and are not counted.
"""

from __future__ import annotations

import polars as pl

#: kernel-launch runtime calls (CUDA runtime and driver, HIP; Level Zero, PI and UR on XPU),
#: matched on the call's name
LAUNCH_CALL_RE = r"^(?:(?:cuda|cu|hip|ze)\w*Launch\w*Kernel|(?:pi|ur)EnqueueKernelLaunch)"
#: launch calls below this never warn (a short profile's few launches say little)
MIN_LAUNCHES = 50
#: warn when the launch calls exceed the kernels this many times over
RATIO = 10


def launch_counts(nodes: pl.DataFrame) -> tuple[int, int]:
    """(kernel-launch runtime calls, GPU kernels) of one rank's nodes."""
    if nodes.height == 0 or "kind" not in nodes.columns:
        return 0, 0
    kind = pl.col("kind")
    kernels = int(nodes.select((pl.col("on_gpu").fill_null(False) & (kind == "kernel")).sum()).item())
    calls = nodes.lazy().filter(kind == "runtime").group_by("name").len().collect()  # names repeat
    launches = int(calls.filter(pl.col("name").str.contains(LAUNCH_CALL_RE))["len"].sum())
    return launches, kernels


def lost_device_activity(nodes: pl.DataFrame) -> str | None:
    """A warning when the kernel-launch calls vastly outnumber the kernels, else None."""
    launches, kernels = launch_counts(nodes)
    if launches < MIN_LAUNCHES or kernels * RATIO >= launches:
        return None
    return (
        f"the profile lost device activity: {launches:,} kernel-launch calls, {kernels:,} GPU kernels; "
        "GPU times cover only the kernels recorded"
    )
