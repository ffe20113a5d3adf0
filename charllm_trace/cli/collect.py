"""Options of ``charllm-trace collect`` that choose what an iteration is (issue 24): ranges of a
``record_function`` marker instead of optimizer steps (collectors/marker_hook.py; docs/collect.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from charllm_trace.core.errors import UsageError


def iteration_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--step-marker NAME``, ``--window DELAY+DURATION``, ``--cpu-hz`` and ``--cpus``."""
    f = click.option(
        "--cpus",
        default=None,
        metavar="N",
        help="Run each rank process on N cores of its own (all local ranks share N cores when there "
        "are too few); the allocation goes into the manifest (docs/collect.md).",
    )(f)
    f = click.option(
        "--cpu-hz",
        type=float,
        default=10.0,
        show_default=True,
        help="CPU scheduler telemetry rate (threads' run/wait times, cgroup throttling); 0 turns it off.",
    )(f)
    f = click.option(
        "--window",
        default=None,
        metavar="DELAY+DURATION",
        help="Trace a time window instead of steps: DURATION seconds from DELAY seconds after each "
        "rank process starts (e.g. 5+2).",
    )(f)
    return click.option(
        "--step-marker",
        default=None,
        metavar="NAME",
        help="Count iterations by the ranges of this record_function name (an inference or serving "
        "loop's decode step, a module's forward...) instead of optimizer.step(); --steps then numbers "
        "them from 0.",
    )(f)


def iteration_args(
    step_marker: str | None, window: str | None, steps: str, cpu_hz: float, cpus: str | None = None
) -> dict[str, Any]:
    """``collect()`` keyword arguments: the marker or the window, the parsed ``--steps``
    (iteration 0 can be traced by a marker: its range opens after the hook is in place), the CPU
    telemetry rate and ``--cpus`` (cores per rank)."""
    from charllm_trace.collectors.cpu_alloc import parse_cpus

    if not cpu_hz >= 0 or cpu_hz > 1000:
        raise UsageError("--cpu-hz must be between 0 (off) and 1000")
    return {"cpu_hz": cpu_hz, "cpus": parse_cpus(cpus), **_iterations(step_marker, window, steps)}


def _iterations(step_marker: str | None, window: str | None, steps: str) -> dict[str, Any]:
    from charllm_trace.collectors.launcher import parse_steps

    if step_marker is not None and not step_marker.strip():
        raise UsageError("--step-marker: an empty name")
    if window is not None:
        if step_marker is not None:
            raise UsageError("--window and --step-marker: choose one (a window traces whatever runs in it)")
        return {"step_marker": None, "window": parse_window(window), "steps": (0, 0)}
    return {"step_marker": step_marker, "steps": parse_steps(steps, allow_zero=step_marker is not None)}


def parse_window(text: str) -> tuple[float, float]:
    """``DELAY+DURATION`` in seconds (``5+2``, ``0.5+1``)."""
    import math

    try:
        delay, dur = (float(x) for x in text.split("+"))
    except ValueError:
        raise UsageError(f"--window {text!r}: expected DELAY+DURATION in seconds (for example 5+2)") from None
    if not (math.isfinite(delay) and math.isfinite(dur)) or delay < 0 or dur <= 0:
        raise UsageError(f"--window {text!r}: DELAY must be >= 0 and DURATION > 0 seconds")
    return delay, dur
