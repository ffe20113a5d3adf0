"""Frame comparison for the readers that must give the same tables."""

from __future__ import annotations

from charllm_trace.converters import kineto


def same_frames(a: kineto.KinetoProfile, b: kineto.KinetoProfile) -> None:
    assert a.events.equals(b.events, null_equal=True)
    assert a.comm_args == b.comm_args
    for f in ("rank", "world_size", "backend", "pg_config", "device_properties", "hostname", "base_ns"):
        assert getattr(a, f) == getattr(b, f), f
    assert (a.schema_version, a.trace_name, a.n_raw_events) == (
        b.schema_version,
        b.trace_name,
        b.n_raw_events,
    )
