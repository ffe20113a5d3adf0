"""Where a rank's telemetry samples came from, in words, for the energy and power notes (pure).

An imported log (``charllm-trace telemetry import``) leaves its facts in ``trace.meta.extra
["telemetry_source"]``: the tool, the log's file name, the sampling rate, how the times were
obtained, the time zone (and whether it was assumed) and the clock offset.
"""

from __future__ import annotations

from typing import Any

from charllm_trace.core.model import Trace


def telemetry_source_note(trace: Trace) -> str | None:
    """One line on the origin and rate of the trace's samples; None for the collector's own."""
    src: Any = trace.meta.extra.get("telemetry_source") if isinstance(trace.meta.extra, dict) else None
    if not isinstance(src, dict) or not src.get("tool"):
        return None
    rate = src.get("rate_hz")
    rate_txt = f"{float(rate):.3g} Hz" if isinstance(rate, (int, float)) and rate > 0 else "unknown rate"
    parts = [f"samples imported from the {src['tool']} log {src.get('file') or '(unknown file)'}, {rate_txt}"]
    if src.get("time_source"):
        parts.append(f"times: {src['time_source']}")
    tz = src.get("tz")
    if tz:
        parts.append(f"time zone {tz}" + (" (assumed, not given)" if src.get("tz_assumed") else ""))
    off = src.get("clock_offset_ns")
    if isinstance(off, int) and off:
        parts.append(f"clock offset {off / 1e6:+.3f} ms applied")
    return "; ".join(parts)
