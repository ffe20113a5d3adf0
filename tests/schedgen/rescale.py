"""The known answer of a what-if: the same schedule simulated again with a class of work scaled
(``tests.schedgen``). The simulator applies its rules to the changed durations, so the
re-simulated step and whole-trace times are what ``--what-if`` should predict."""

from __future__ import annotations

import dataclasses

from tests.schedgen.sim import AllReduce, GraphLaunch, Kernel, Op, Schedule


def _scaled(op: Op, gemm: float, gpu: float, comm: float) -> Op:
    if isinstance(op, Kernel) and not op.memcpy:
        f = gemm if "gemm" in op.name else gpu
        return dataclasses.replace(op, dur=round(op.dur * f))
    if isinstance(op, GraphLaunch):  # its kernels are not GEMMs (``graph_kernel_i``)
        return dataclasses.replace(op, durs=tuple(round(d * gpu) for d in op.durs))
    if isinstance(op, AllReduce):  # the collective's CPU op's own time is communication too
        return dataclasses.replace(
            op, transfer=round(op.transfer * comm), pre=round(op.pre * comm), post=round(op.post * comm)
        )
    return op


def rescaled(s: Schedule, *, gemm: float | None = None, gpu: float = 1.0, comm: float = 1.0) -> Schedule:
    """``s`` simulated again with GEMM kernels (their names say ``gemm``) times ``gemm`` (default:
    ``gpu``), the other compute kernels and graph-launched kernels times ``gpu``, and every
    all-reduce's transfer and its CPU op's own time (``core.classify``: communication) times
    ``comm`` (the what-if keys ``gemm=``, ``gpu=``, ``comm=``)."""
    steps, costs, world, scale = s.spec
    g = gpu if gemm is None else gemm
    new = [[_scaled(op, g, gpu, comm) for op in step] for step in steps]
    return Schedule(new, costs=costs, world=world, cpu_scale=scale)


def step_times(s: Schedule, r: int) -> list[int]:
    """Rank r's step window lengths (``Schedule.step_windows``: as the analyser tiles them)."""
    return [s.t(e) - s.t(a) for e, a in s.step_windows(r)]


def whole_time(s: Schedule, r: int) -> int:
    sink, w0 = s.window(r)
    return s.t(sink) - w0
