"""``charllm-trace collect`` (issue 4): the click command (registered in cli/app.py) and the options
that choose what an iteration is (issue 24): ranges of a ``record_function`` marker instead of
optimizer steps (collectors/marker_hook.py; docs/collect.md).

The work is :func:`charllm_trace.collectors.launcher.collect`, imported when the command runs.
"""

from __future__ import annotations

import sys
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


@click.command(
    "collect",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "-o", "--output", "run_dir", default=None, help="Run directory (default: charllm-run-<date>-<time>)."
)
@click.option(
    "--steps",
    default="1-2",
    show_default=True,
    help="Training steps to trace, N or A-B (0-based, see docs/collect.md).",
)
@click.option(
    "--ranks", default="all", show_default=True, help="Ranks to trace: all, or a list like 0,8,16-18."
)
@click.option(
    "--telemetry-hz",
    type=float,
    default=100.0,
    show_default=True,
    help="GPU telemetry rate per node; 0 turns it off.",
)
@click.option(
    "--telemetry-source",
    default="auto",
    show_default=True,
    help="auto, nvml, amdsmi, none, or replay:PATH (a recorded stream).",
)
@click.option("--parallel", default=None, help="Parallel layout for the manifest, e.g. tp=8,pp=4,dp=2,ep=1.")
@click.option("--workload", default=None,
              help="What is trained, for the manifest (compare lists it), e.g. model=llama-7b,mbs=1,gbs=256,seq=4096.")  # fmt: skip
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the Kineto profile (larger files).")
@click.option("--force", is_flag=True, help="Replace the trace files of an existing run directory.")
@iteration_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def collect_cmd(
    run_dir: str | None,
    steps: str,
    step_marker: str | None,
    window: str | None,
    cpu_hz: float,
    cpus: str | None,
    ranks: str,
    telemetry_hz: float,
    telemetry_source: str,
    parallel: str | None,
    workload: str | None,
    with_stack: bool,
    force: bool,
    command: tuple[str, ...],
) -> None:
    """Run a training COMMAND (after --) and collect traces of chosen steps and GPU telemetry.

    \b
    charllm-trace collect -o run --steps 10-12 -- torchrun --nproc_per_node 8 train.py ...
    Exits with the training command's exit code.
    """
    from charllm_trace.collectors.launcher import (
        collect,
        parse_parallel,
        parse_ranks,
        parse_workload,
    )

    result = collect(
        list(command),
        run_dir,
        **iteration_args(step_marker, window, steps, cpu_hz, cpus),
        ranks=parse_ranks(ranks),
        telemetry_hz=telemetry_hz,
        telemetry_source=telemetry_source,
        parallel=parse_parallel(parallel),
        workload=parse_workload(workload),
        force=force,
        with_stack=with_stack,
        log=lambda msg: click.echo(f"charllm-trace: {msg}", err=True),
    )
    click.echo(f"charllm-trace: run directory {result.run_dir} (exit code {result.exit_code})", err=True)
    sys.exit(result.exit_code)
