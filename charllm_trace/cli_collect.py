"""Options of ``charllm-trace collect`` that choose what an iteration is (issue 24): ranges of a
``record_function`` marker instead of optimizer steps (collectors/marker_hook.py; docs/collect.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from charllm_trace.errors import UsageError


def iteration_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--step-marker NAME``."""
    return click.option(
        "--step-marker",
        default=None,
        metavar="NAME",
        help="Count iterations by the ranges of this record_function name (an inference or serving "
        "loop's decode step, a module's forward...) instead of optimizer.step(); --steps then numbers "
        "them from 0.",
    )(f)


def iteration_args(step_marker: str | None, steps: str) -> dict[str, Any]:
    """``collect()`` keyword arguments: the marker and the parsed ``--steps`` (iteration 0 can be
    traced by a marker: its range opens after the hook is in place)."""
    from charllm_trace.collectors.launcher import parse_steps

    if step_marker is not None and not step_marker.strip():
        raise UsageError("--step-marker: an empty name")
    return {"step_marker": step_marker, "steps": parse_steps(steps, allow_zero=step_marker is not None)}
