"""Property test: any trace the model can hold survives write -> read unchanged,
with the C scanner, the numpy decoder and the protobuf-runtime reference decoder."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import orjson
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from charllm_trace.core.model import COLL_TYPES, NODE_KINDS, NODE_TYPES, ProcessGroup, Trace, TraceMeta
from charllm_trace.et import _native
from charllm_trace.et.reader import decode_et_reference, read_et
from charllm_trace.et.writer import write_et
from tests.helpers.fuzz_budget import examples

I64 = st.integers(-(2**63), 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=20)


def opt(s: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | s


JSON_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
ATTR_KEYS = TEXT | st.sampled_from(
    ["tid", "comm_type", "pg_name", "charllm.start_ns", "comm_src", "op_schema"]
)
ATTRS = opt(
    st.dictionaries(ATTR_KEYS, JSON_VALUE, max_size=5).map(lambda d: orjson.dumps(d).decode())
    | st.sampled_from(['{"a": 1}', "{}", "not json", "[1,2]", ""])
)
IO = opt(st.fixed_dictionaries({"values": opt(TEXT), "shapes": opt(TEXT), "types": opt(TEXT)}))


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    ids = draw(st.lists(I64, unique=True, max_size=12))
    n = len(ids)

    def col(s: st.SearchStrategy) -> list:
        return draw(st.lists(s, min_size=n, max_size=n))

    nodes = pl.DataFrame(
        {
            "id": ids,
            "name": col(opt(st.text(max_size=40))),
            "node_type": col(opt(st.sampled_from([t for t in NODE_TYPES if t != "INVALID"]))),  # refused
            "kind": col(opt(st.sampled_from(NODE_KINDS))),
            "on_gpu": col(opt(st.booleans())),
            "pid": col(opt(I64)),
            "tid": col(opt(I64)),
            "device": col(opt(I32)),
            "stream": col(opt(I64)),
            "start_ns": col(opt(st.integers(0, 2**62))),  # the reader refuses times before 1970, beyond
            "dur_ns": col(opt(st.integers(0, 2**61))),  # (et/validate.check_times) and negative durations
            "parent": col(opt(I64)),
            "launch_id": col(opt(I64)),
            "correlation": col(opt(I64)),
            "rf_id": col(opt(I64)),
            "external_id": col(opt(I64)),
            "coll_type": col(opt(st.sampled_from(COLL_TYPES))),
            "comm_bytes": col(opt(st.integers(0, 2**63 - 1))),  # the reader refuses negative sizes
            "dtype": col(opt(TEXT)),
            "num_elems": col(opt(I64)),
            "pg_name": col(opt(TEXT)),
            "coll_seq": col(opt(I64)),
            "peer": col(opt(I32)),
            "root": col(opt(I32)),
            "in_split": col(opt(st.lists(opt(I64), max_size=4))),
            "out_split": col(opt(st.lists(I64, max_size=4))),
            "inputs": col(IO),
            "outputs": col(IO),
            "attrs": col(ATTRS),
        },
        schema_overrides={"in_split": pl.List(pl.Int64), "out_split": pl.List(pl.Int64)},
        strict=False,
    )
    # dependencies between nodes of the trace, each on an earlier node (the reader refuses
    # dependencies on absent nodes, on the node itself, and control cycles)
    pairs = (
        [
            draw(st.tuples(st.integers(0, n - 2), st.integers(1, n - 1)))
            for _ in range(draw(st.integers(0, 8)))
        ]
        if n > 1
        else []
    )
    pairs = [(a, b) for a, b in pairs if a < b]
    m = len(pairs)
    deps = pl.DataFrame(
        {
            "node": [ids[b] for _, b in pairs],
            "dep": [ids[a] for a, _ in pairs],
            "kind": [draw(st.sampled_from(["ctrl", "data"])) for _ in range(m)],
        },
        schema={"node": pl.Int64, "dep": pl.Int64, "kind": pl.String},
    )
    k = draw(st.integers(0, 5))
    fl = opt(st.floats(allow_nan=False, allow_infinity=False))
    tel = pl.DataFrame(
        {
            "time_ns": draw(st.lists(opt(I64), min_size=k, max_size=k)),
            "device": draw(st.lists(opt(st.integers(0, 7)), min_size=k, max_size=k)),
            "power_w": draw(st.lists(fl, min_size=k, max_size=k)),
            "energy_j": draw(st.lists(fl, min_size=k, max_size=k)),
            "throttle_reasons": draw(st.lists(opt(I64), min_size=k, max_size=k)),
        },
        schema={
            "time_ns": pl.Int64,
            "device": pl.Int32,
            "power_w": pl.Float64,
            "energy_j": pl.Float64,
            "throttle_reasons": pl.Int64,
        },
    )
    pg_names = draw(st.lists(TEXT, unique=True, max_size=3))
    world = draw(opt(st.integers(1, 1024)))
    meta = TraceMeta(
        rank=draw(opt(st.integers(0, (world or 1024) - 1))),  # the reader refuses a rank >= the world size
        world_size=world,
        device_model=draw(opt(TEXT)),
        device_index=draw(opt(st.integers(0, 15))),
        hostname=draw(opt(TEXT)),
        has_timestamps=draw(st.booleans()),
        clock=draw(st.sampled_from(["unix_ns", "none"])),
        source=draw(st.sampled_from(["kineto", "host_et+kineto", "unknown", "chakra-et"])),
        source_schema=draw(opt(TEXT)),
        process_groups=tuple(
            ProcessGroup(name, draw(opt(TEXT)), tuple(draw(st.lists(st.integers(0, 64), max_size=5))))
            for name in pg_names
        ),
        extra=draw(st.dictionaries(TEXT, JSON_VALUE, max_size=3)),
    )
    return Trace(nodes=nodes, deps=deps, telemetry=tel, meta=meta)


@contextlib.contextmanager
def decoder(kind: str):
    old = os.environ.get("CHARLLM_TRACE_NATIVE")
    os.environ["CHARLLM_TRACE_NATIVE"] = "0" if kind == "numpy" else "1"
    _native.reset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CHARLLM_TRACE_NATIVE", None)
        else:
            os.environ["CHARLLM_TRACE_NATIVE"] = old
        _native.reset()


@settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(traces(), st.booleans())
def test_write_read_roundtrip(trace: Trace, gz: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / ("rank.et.gz" if gz else "rank.et")
        write_et(trace, p)
        for kind in ("c", "numpy"):
            with decoder(kind):
                back = read_et(p, cache=False)
            assert back.equals(trace), kind
        ref, _ = decode_et_reference(
            p.read_bytes() if not gz else __import__("gzip").decompress(p.read_bytes()), p
        )
        assert ref.equals(trace), "reference"
