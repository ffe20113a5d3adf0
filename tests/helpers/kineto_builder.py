"""Kineto profiles built in tests: one complete event (``x``) and the trace of a profile document
(``trace_of``: written to a file and converted as a real profile is)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from charllm_trace.converters.build import kineto_trace
from charllm_trace.converters.kineto import read_kineto
from charllm_trace.core.model import Trace

T0 = 1_712_000_000_000_000  # absolute µs of the profiles' time 0


def x(
    name: str, cat: str, ts: float, dur: float, pid: int = 1, tid: int = 1, *, t0: int = T0, **args: Any
) -> dict:
    """A complete (``ph: X``) event ``ts`` µs after ``t0``, lasting ``dur`` µs; ``args`` its args."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": t0 + ts,
        "dur": dur,
        "args": args,
    }


def trace_of(path: Path, doc: dict) -> Trace:
    """The trace of the Kineto profile ``doc``, written to ``path`` and read back."""
    path.write_text(json.dumps(doc))
    trace, _ = kineto_trace(read_kineto(path))
    return trace
