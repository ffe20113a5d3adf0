"""Bad Kineto profiles, each given to every command that reads one."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bad_inputs import valid
from tests.bad_inputs.registry import (
    _events,
    _gzip_bomb,
    _kernel,
    _raw,
    bad_input,
)

# --- Kineto profiles --------------------------------------------------------------------------


@bad_input("kineto", ("rank-0.json", "empty"))
def kineto_empty(d: Path) -> Path:
    return _raw(d, "rank-0.json", b"")


@bad_input("kineto", ("rank-0.json",))
def kineto_only_whitespace(d: Path) -> Path:
    return _raw(d, "rank-0.json", b" \n\t" * 1000)


@bad_input("kineto", ("rank-0.json",))
def kineto_json_array(d: Path) -> Path:
    return _raw(d, "rank-0.json", b"[1, 2, 3]")


@bad_input("kineto", ("rank-0.json",))
def kineto_trace_events_not_a_list(d: Path) -> Path:
    return _raw(d, "rank-0.json", b'{"traceEvents": 5}')


@bad_input("kineto", ("rank-0.json",))
def kineto_events_not_objects(d: Path) -> Path:
    return _raw(d, "rank-0.json", b'{"traceEvents": [1, null, "x", [2]]}')


@bad_input("kineto", ("rank-0.json",))
def kineto_truncated(d: Path) -> Path:
    data = json.dumps(valid.kineto_doc()).encode()
    return _raw(d, "rank-0.json", data[: len(data) * 2 // 3])


@bad_input("kineto", ("rank-0.json",))
def kineto_random_bytes(d: Path) -> Path:
    return _raw(d, "rank-0.json", bytes((i * 7919 + 13) % 256 for i in range(5000)))


@bad_input("kineto", ("rank-0.json",))
def kineto_invalid_utf8_name(d: Path) -> Path:
    data = json.dumps(valid.kineto_doc()).encode().replace(b"aten::mm", b"aten::\xff\xfe", 1)
    return _raw(d, "rank-0.json", data)


@bad_input("kineto", ("rank-0.json",))
def kineto_nan_literal(d: Path) -> Path:
    data = json.dumps(valid.kineto_doc()).encode().replace(b'"dur": 3000', b'"dur": NaN', 1)
    return _raw(d, "rank-0.json", data)


def _set(field: str, value: Any, cat: str = "kernel") -> Callable[[list[dict[str, Any]]], None]:
    def mutate(ev: list[dict[str, Any]]) -> None:
        e = next(e for e in ev if e.get("cat") == cat)
        if field == "pid" and cat == "kernel":
            e["args"].pop("device")  # the pid is then the device index
        if value is _DELETE:
            e.pop(field, None)
        else:
            e[field] = value

    return mutate


_DELETE = object()
for _name, _field, _value, _cat in [
    ("ts_list", "ts", [1, 2], "kernel"),
    ("ts_string", "ts", "yesterday", "kernel"),
    ("ts_bool", "ts", True, "cpu_op"),
    ("ts_1e30", "ts", 1e30, "kernel"),
    ("ts_minus_1e30", "ts", -1e30, "cpu_op"),
    ("ts_missing", "ts", _DELETE, "kernel"),
    ("dur_nan_string", "dur", "NaN", "kernel"),
    ("dur_negative", "dur", -5000, "kernel"),
    ("dur_1e30", "dur", 1e30, "cpu_op"),
    ("dur_list", "dur", [1], "kernel"),
    ("gpu_pid_huge", "pid", 2**40, "kernel"),
    ("tid_beyond_int64", "tid", 2**70, "cpu_op"),
    ("correlation_beyond_int64", "args", {"correlation": 2**65}, "kernel"),
]:

    def _make(d: Path, _f=_field, _v=_value, _c=_cat) -> Path:
        return _events(d, _set(_f, _v, _c))

    _make.__name__ = f"kineto_{_name}"
    bad_input("kineto", ("rank-0.json",))(_make)


def _top(key: str, value: Any) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        doc = valid.kineto_doc()
        if isinstance(value, dict):
            doc[key] = {**doc.get(key, {}), **value}
        else:
            doc[key] = value
        return valid.dump(d / "rank-0.json", doc)

    return make


for _name, _key, _value in [
    ("base_time_1e30", "baseTimeNanoseconds", 1e30),
    ("base_time_string", "baseTimeNanoseconds", "now"),
    ("rank_string", "distributedInfo", {"rank": "1"}),
    ("rank_negative", "distributedInfo", {"rank": -1}),
    ("rank_huge", "distributedInfo", {"rank": 10**12}),
    ("world_size_zero", "distributedInfo", {"world_size": 0}),
    ("world_size_below_rank", "distributedInfo", {"rank": 5, "world_size": 2}),
]:
    _m = _top(_key, _value)
    _m.__name__ = f"kineto_{_name}"
    bad_input("kineto", ("rank-0.json",))(_m)


@bad_input("kineto", ("rank-0.json",))
def kineto_deep_nesting_in_args(d: Path) -> Path:
    data = json.dumps(valid.kineto_doc()).encode()
    deep = b"[" * 200_000 + b"]" * 200_000
    return _raw(d, "rank-0.json", data.replace(b'"stream": 7', b'"stream": 7, "x": ' + deep, 1))


@bad_input("kineto", ("rank-0.json",))
def kineto_deep_nesting_top(d: Path) -> Path:
    return _raw(d, "rank-0.json", b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b', "traceEvents": []}')


@bad_input("kineto", ("rank-0.json.gz", "not JSON"))
def kineto_gzip_bomb_zeros(d: Path) -> Path:
    return _gzip_bomb(d / "rank-0.json.gz", b"\0")


@bad_input("kineto", ("rank-0.json.gz", "gzip bomb"))
def kineto_gzip_bomb_spaces(d: Path) -> Path:
    return _gzip_bomb(d / "rank-0.json.gz", b" ", head=b'{"traceEvents": [')


@bad_input("kineto", ("rank-0.json.gz",))
def kineto_gzip_truncated(d: Path) -> Path:
    data = gzip.compress(json.dumps(valid.kineto_doc()).encode())
    return _raw(d, "rank-0.json.gz", data[: len(data) // 2])


@bad_input("kineto", ("rank-0.json.gz",))
def kineto_gzip_corrupt(d: Path) -> Path:
    data = bytearray(gzip.compress(json.dumps(valid.kineto_doc()).encode()))
    for i in range(40, len(data) - 20, 7):
        data[i] ^= 0x5A
    return _raw(d, "rank-0.json.gz", bytes(data))


@bad_input("kineto", ("rank-0.json", "FIFO"))
def kineto_fifo(d: Path) -> Path:
    os.mkfifo(d / "rank-0.json")
    return d / "rank-0.json"


@bad_input("kineto", ("rank-0.json.gz", "FIFO"))
def kineto_fifo_gz(d: Path) -> Path:
    os.mkfifo(d / "rank-0.json.gz")
    return d / "rank-0.json.gz"


@bad_input("kineto", ("rank-0.json", "dangling"))
def kineto_dangling_symlink(d: Path) -> Path:
    (d / "rank-0.json").symlink_to(d / "gone.json")
    return d / "rank-0.json"


@bad_input("kineto", ("rank-0.json", "loop"))
def kineto_symlink_loop(d: Path) -> Path:
    (d / "rank-0.json").symlink_to(d / "b.json")
    (d / "b.json").symlink_to(d / "rank-0.json")
    return d / "rank-0.json"


@bad_input("kineto", ("rank-0.json",), only=("convert",))
def kineto_directory_named_json(d: Path) -> Path:
    (d / "rank-0.json").mkdir()
    return d / "rank-0.json"


def _kernel_time_text(d: Path, key: str, text: str) -> Path:
    """The first kernel's ``key`` written as the raw JSON number ``text`` (past float64: 1e999)."""
    doc = valid.kineto_doc()
    _kernel(doc["traceEvents"])[key] = 12345.678
    p = d / "rank-0.json"
    p.write_text(json.dumps(doc).replace("12345.678", text))
    return p


@bad_input("kineto", ("rank-0.json", "dur is '1e999'"))
def kineto_dur_1e999(d: Path) -> Path:  # issue 28: msgspec's "Number out of range", exit 3
    return _kernel_time_text(d, "dur", "1e999")


@bad_input("kineto", ("rank-0.json", "ts is '-1e999'"))
def kineto_ts_minus_1e999(d: Path) -> Path:
    return _kernel_time_text(d, "ts", "-1e999")
