"""The schedules' regimes (``tests.schedgen``)."""

from __future__ import annotations

from tests.schedgen.sim import (
    COMPUTE,
    SIDE,
    AllReduce,
    Costs,
    Cpu,
    GraphLaunch,
    Kernel,
    Op,
    Schedule,
    Sync,
    WaitEvent,
)


def gpu_bound(n_steps: int = 3, n_kernels: int = 40, world: int = 1) -> Schedule:
    """Kernels of 200 µs behind 10 µs of CPU each: the CPU runs ahead, kernels queue."""
    step = [Kernel(200_000) for _ in range(n_kernels)] + [Sync()]
    return Schedule([step] * n_steps, world=world)


def launch_bound(n_steps: int = 3, n_kernels: int = 40) -> Schedule:
    """Kernels of 2 µs behind launch calls of 20 µs: the stream is idle at every launch."""
    step = [Kernel(2_000, pre=500, post=500) for _ in range(n_kernels)] + [Sync()]
    return Schedule([step] * n_steps, costs=Costs(launch_call=20_000, latency=25_000))


def cpu_bound(n_steps: int = 3) -> Schedule:
    """CPU work between small kernels: the path is CPU ops."""
    step = [op for _ in range(20) for op in (Cpu(100_000), Kernel(5_000))] + [Sync()]
    return Schedule([step] * n_steps)


def switching(n_steps: int = 2) -> Schedule:
    """A CPU-bound half then a GPU-bound half inside every step."""
    step = [op for _ in range(10) for op in (Cpu(80_000), Kernel(5_000))]
    step += [Kernel(150_000, stream=COMPUTE) for _ in range(15)] + [Sync()]
    return Schedule([step] * n_steps)


def graphs(n_steps: int = 3) -> Schedule:
    """cudaGraphLaunch of 30 kernels of 40 µs each, after a few eager kernels."""
    step = [Kernel(20_000) for _ in range(5)] + [GraphLaunch(tuple([40_000] * 30)), Sync()]
    return Schedule([step] * n_steps)


def streams_and_events(n_steps: int = 3) -> Schedule:
    """Two streams joined by events: a side stream waits for the compute stream and back."""
    step: list[Op] = []
    for _ in range(6):
        step += [
            Kernel(60_000),
            WaitEvent(COMPUTE, SIDE),
            Kernel(90_000, stream=SIDE),
            WaitEvent(SIDE, COMPUTE),
        ]
    step += [Kernel(10_000, memcpy=True), Sync()]
    return Schedule([step] * n_steps)


def collective(world: int = 2, n_steps: int = 3, slow: int = 1) -> Schedule:
    """Ranks compute then all-reduce; rank ``slow`` has 3x slower CPU (the others wait for it)."""
    step: list[Op] = [op for _ in range(10) for op in (Cpu(30_000), Kernel(50_000))]
    step += [AllReduce(400_000), Kernel(30_000), Sync()]
    scale = [1.0] * world
    scale[slow] = 3.0
    return Schedule([step] * n_steps, world=world, cpu_scale=scale)


REGIMES = {
    "gpu_bound": gpu_bound,
    "launch_bound": launch_bound,
    "cpu_bound": cpu_bound,
    "switching": switching,
    "graphs": graphs,
    "streams_and_events": streams_and_events,
    "collective": collective,
}
