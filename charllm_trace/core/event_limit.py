"""The most complete events (Kineto) or nodes (Chakra ET) one rank's trace may hold (issue 28).

Memory grows with the events of a trace: ``analyze`` of one generated single-rank profile
(``benchmarks/make_big_profile.py``, measured with ``benchmarks/cli_peak.py`` on this project's 2-core
machine) peaked at 0.92 GB for 1 M events, 1.72 GB for 2 M and 3.29 GB for 4 M: about 0.8 GB per
million. A trace past :data:`MAX_EVENTS` is refused by its reader as the count passes the limit
(the Kineto reader counts as it decodes, an ET of ours declares its count in its header), before the
memory is spent, with one line naming the limit and ``CHARLLM_TRACE_MAX_EVENTS``, which raises it.
"""

from __future__ import annotations

import os

from charllm_trace.core.errors import InputError
from charllm_trace.core.limits import env_int

#: complete events (or ET nodes) of one rank's trace: 5 M is about 4 GB for ``analyze`` (measured
#: above); real per-rank profiles of 50-200 MB of JSON hold 0.2-1 M
MAX_EVENTS = 5_000_000
ENV = "CHARLLM_TRACE_MAX_EVENTS"


def max_events() -> int:
    return env_int(ENV, MAX_EVENTS)


def check_event_count(
    path: str | os.PathLike[str], n: int, limit: int, what: str = "complete events"
) -> None:
    """``InputError`` when ``n`` (events read so far, or declared) passes ``limit``."""
    if n > limit:
        raise InputError(
            path,
            f"{what}: at least {n:,}, past the limit of {limit:,} for one rank's trace (analysing takes "
            f"about 0.8 GB per million); set {ENV} to a larger number to read it anyway",
        )
