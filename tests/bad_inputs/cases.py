"""The bad inputs and the commands each is given to (>= 150 cases; issue 15).

A case builds its input in an empty directory and returns the command line; the CLI must answer
with exit code 2 and one line ``error: ...`` holding every needle (the file's name at least).
Inputs are made on the fly from the small valid ones of :mod:`tests.bad_inputs.valid`; bombs are
built by compressing repeated bytes, so nothing large is stored in the repository.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bad_inputs import valid


@dataclass(frozen=True)
class Case:
    name: str  # "<input>/<command>"
    build: Callable[[Path], list[str]]  # makes the input under the directory, returns argv
    needles: tuple[str, ...]  # the error line holds each of these


# --- the commands a single input file is given to -------------------------------------------


def _cmds(kind: str) -> dict[str, Callable[[Path, Path], list[str]]]:
    """Command lines for an input of ``kind`` at ``p`` (outputs go under ``d``)."""
    common = {
        "info": lambda p, d: ["info", str(p)],
        "analyze": lambda p, d: ["analyze", str(p)],
        "report": lambda p, d: ["report", str(p), "-o", str(d / "out.html")],
        "perfetto": lambda p, d: ["export", "perfetto", str(p), "-o", str(d / "out.json")],
    }
    if kind == "kineto":
        return {**common, "convert": lambda p, d: ["convert", str(p), "-o", str(d / "ets")]}
    if kind == "et":
        return {
            **common,
            "astra-sim": lambda p, d: ["export", "astra-sim", str(p), "-o", str(d / "astra")],
            "sanitize": lambda p, d: ["sanitize", str(p), "-o", str(d / "clean")],
        }
    if kind == "run":
        return {
            "info": common["info"],
            "analyze": common["analyze"],
            "convert": lambda p, d: ["convert", str(p), "-o", str(d / "ets")],
            "baseline": lambda p, d: ["baseline", str(p), "-o", str(d / "base.json")],
        }
    raise ValueError(kind)


CASES: list[Case] = []


def bad_input(kind: str, needles: tuple[str, ...] = (), only: tuple[str, ...] | None = None):
    """Register ``make(dir) -> path`` as one bad input, given to every command of ``kind``."""

    def register(make: Callable[[Path], Path]) -> Callable[[Path], Path]:
        for cmd, argv in _cmds(kind).items():
            if only is not None and cmd not in only:
                continue

            def build(d: Path, make=make, argv=argv) -> list[str]:
                return argv(make(d), d)

            CASES.append(Case(f"{kind}:{make.__name__}/{cmd}", build, needles))
        return make

    return register


def _events(d: Path, mutate: Callable[[list[dict[str, Any]]], None], name: str = "rank-0.json") -> Path:
    doc = valid.kineto_doc()
    mutate(doc["traceEvents"])
    return valid.dump(d / name, doc)


def _kernel(ev: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in ev if e.get("cat") == "kernel")


def _raw(d: Path, name: str, data: bytes) -> Path:
    p = d / name
    p.write_bytes(data)
    return p


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


_BOMBS: dict[tuple[bytes, bytes], bytes] = {}


def gzip_bomb(byte: bytes, head: bytes = b"", n: int = 1 << 30) -> bytes:
    """``head`` then ``n`` copies of ``byte``, gzip-compressed (about 1 MB for 1 GiB), made once."""
    import zlib

    key = (byte, head)
    if key not in _BOMBS:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [c.compress(head)]
        block = byte * (16 << 20)
        parts += [c.compress(block) for _ in range(n // len(block))]
        parts.append(c.flush())
        _BOMBS[key] = b"".join(parts)
    return _BOMBS[key]


def _gzip_bomb(path: Path, byte: bytes, head: bytes = b"") -> Path:
    path.write_bytes(gzip_bomb(byte, head))
    return path


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


# --- Chakra ETs ---------------------------------------------------------------------------------


def _et_of(d: Path, change: Callable[[Any], Any], name: str = "rank-0.et") -> Path:
    """``small_trace()`` changed by ``change(trace) -> trace``, written as an ET."""
    from charllm_trace.et.writer import write_et
    from tests.test_et_roundtrip import small_trace

    p = d / name
    write_et(change(small_trace()), p)
    return p


def _et_bytes(d: Path, name: str, change: Callable[[bytes], bytes]) -> Path:
    p = valid.et(d, "good.et")
    data = p.read_bytes()
    p.unlink()
    return _raw(d, name, change(data))


@bad_input("et", ("rank-0.et", "empty"))
def et_empty(d: Path) -> Path:
    return _raw(d, "rank-0.et", b"")


@bad_input("et", ("rank-0.et",))
def et_random_bytes(d: Path) -> Path:
    return _raw(d, "rank-0.et", bytes((i * 7919 + 13) % 256 for i in range(4000)))


@bad_input("et", ("rank-0.et", "truncated"))
def et_truncated_mid_message(d: Path) -> Path:
    return _et_bytes(d, "rank-0.et", lambda b: b[:-7])


@bad_input("et", ("rank-0.et",))
def et_json_text(d: Path) -> Path:
    return _raw(d, "rank-0.et", json.dumps(valid.kineto_doc()).encode())


@bad_input("et", ("rank-0.et.gz",))
def et_gzip_bomb_zeros(d: Path) -> Path:
    return _raw(d, "rank-0.et.gz", gzip_bomb(b"\0"))


@bad_input("et", ("rank-0.et.gz",))
def et_gzip_bomb_of_garbage(d: Path) -> Path:
    return _raw(d, "rank-0.et.gz", gzip_bomb(b"\xff\x01"))


@bad_input("et", ("rank-0.et.gz",))
def et_gzip_truncated(d: Path) -> Path:
    return _et_bytes(d, "rank-0.et.gz", lambda b: gzip.compress(b)[:-20])


@bad_input("et", ("rank-0.et", "FIFO"))
def et_fifo(d: Path) -> Path:
    os.mkfifo(d / "rank-0.et")
    return d / "rank-0.et"


@bad_input("et", ("rank-0.et", "dangling"))
def et_dangling_symlink(d: Path) -> Path:
    (d / "rank-0.et").symlink_to(d / "gone.et")
    return d / "rank-0.et"


@bad_input("et", ("rank-0.et", "loop"))
def et_symlink_loop(d: Path) -> Path:
    (d / "rank-0.et").symlink_to(d / "x.et")
    (d / "x.et").symlink_to(d / "rank-0.et")
    return d / "rank-0.et"


_GRAPH_CMDS = ("info", "analyze", "report", "perfetto", "astra-sim")  # sanitize copies, not reads, a graph


@bad_input("et", ("rank-0.et", "appears 2 times"), only=_GRAPH_CMDS)
def et_duplicate_node_ids(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.repeat_first_node(valid.et(d))


@bad_input("et", ("rank-0.et", "appears 2 times"), only=_GRAPH_CMDS)
def et_every_node_twice(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.every_node_twice(valid.et(d))


@bad_input("et", ("rank-0.et", "negative duration"), only=_GRAPH_CMDS)
def et_negative_duration(d: Path) -> Path:
    import polars as pl

    def change(t: Any) -> Any:
        t.nodes = t.nodes.with_columns(pl.Series("dur_ns", [-100_000, 2_000, 40_001, 499], dtype=pl.Int64))
        return t

    return _et_of(d, change)


@bad_input("et", ("rank-0.et", "beyond any real trace"), only=_GRAPH_CMDS)
def et_start_near_int64_max(d: Path) -> Path:
    import polars as pl

    def change(t: Any) -> Any:
        t.nodes = t.nodes.with_columns(pl.Series("start_ns", [2**63 - 10, 2**63 - 5, 2**63 - 3, 2**63 - 2]))
        return t

    return _et_of(d, change)


@bad_input("et", ("rank-0.et", "cycle"), only=_GRAPH_CMDS)
def et_dependency_cycle(d: Path) -> Path:
    import polars as pl

    def change(t: Any) -> Any:
        t.deps = pl.DataFrame({"node": [2, 3, 1], "dep": [1, 2, 3], "kind": ["ctrl", "ctrl", "ctrl"]})
        return t

    return _et_of(d, change)


@bad_input("et", ("rank-0.et",), only=_GRAPH_CMDS)
def et_dependency_on_missing_node(d: Path) -> Path:
    import polars as pl

    def change(t: Any) -> Any:
        t.deps = pl.DataFrame({"node": [2], "dep": [999], "kind": ["data"]})
        return t

    return _et_of(d, change)


@bad_input("et", ("rank-0.et", "99.0.0"), only=_GRAPH_CMDS)
def et_unsupported_schema_version(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.with_global_version(valid.et(d), "99.0.0")


@bad_input("et", ("rank-0.et", "999"), only=_GRAPH_CMDS)
def et_unsupported_model_version(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.with_global_attr(valid.et(d), "charllm.model_version", 999)


@bad_input("et", ("rank-0.et",), only=_GRAPH_CMDS)
def et_telemetry_rows_1e12(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.with_global_attr(valid.et(d), "charllm.telemetry.rows", 10**12)


@bad_input("et", ("rank-0.et", "truncated"), only=_GRAPH_CMDS)
def et_cut_at_message_boundary(d: Path) -> Path:
    from tests.bad_inputs import et_edit

    return et_edit.drop_last_message(valid.et(d))


# --- run directories ----------------------------------------------------------------------------


def _run(d: Path, change: Callable[[Path], None]) -> Path:
    run = valid.run_dir(d)
    change(run)
    return run


def _run_case(fn: Callable[[Path], None], needles: tuple[str, ...], only: tuple[str, ...] | None = None):
    def make(d: Path) -> Path:
        return _run(d, fn)

    make.__name__ = fn.__name__
    bad_input("run", needles, only)(make)
    return fn


def _fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def run_rank_file_fifo(r: Path) -> None:
    _fifo(r / "rank-1.kineto.json.gz")


def run_host_et_fifo(r: Path) -> None:
    _fifo(r / "rank-0.host_et.json.gz")


def run_rank_file_dangling(r: Path) -> None:
    (r / "rank-1.kineto.json.gz").unlink()
    (r / "rank-1.kineto.json.gz").symlink_to(r / "elsewhere.json.gz")


def run_rank_file_loop(r: Path) -> None:
    (r / "rank-1.kineto.json.gz").unlink()
    (r / "rank-1.kineto.json.gz").symlink_to(r / "loop.json.gz")
    (r / "loop.json.gz").symlink_to(r / "rank-1.kineto.json.gz")


def run_rank_file_directory(r: Path) -> None:
    (r / "rank-1.kineto.json.gz").unlink()
    (r / "rank-1.kineto.json.gz").mkdir()


def run_manifest_fifo(r: Path) -> None:
    _fifo(r / "manifest.json")


def run_manifest_not_json(r: Path) -> None:
    (r / "manifest.json").write_text("{not json")


def run_manifest_deeply_nested(r: Path) -> None:
    (r / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)


def _manifest(r: Path, **kv: Any) -> None:
    m = json.loads((r / "manifest.json").read_text())
    m.update(kv)
    (r / "manifest.json").write_text(json.dumps(m))


def run_only_rank_1_of_2(r: Path) -> None:
    for p in r.glob("rank-0.*"):
        p.unlink()


def run_manifest_says_world_8(r: Path) -> None:
    _manifest(r, world_size=8)


def run_manifest_world_size_string(r: Path) -> None:
    _manifest(r, world_size="two")


def run_manifest_version_99(r: Path) -> None:
    _manifest(r, manifest_version=99)


def run_host_et_duplicate_ids(r: Path) -> None:
    p = r / "rank-0.host_et.json.gz"
    doc = valid.load(p)
    for n in doc["nodes"]:
        n["id"] = 7
    valid.dump(p, doc)


def run_host_et_schema_9(r: Path) -> None:
    p = r / "rank-0.host_et.json.gz"
    doc = valid.load(p)
    doc["schema"] = "9.9.9"
    valid.dump(p, doc)


def run_host_et_huge_input_dims(r: Path) -> None:
    p = r / "rank-0.host_et.json.gz"
    doc = valid.load(p)
    for node in doc["nodes"]:
        ins = node.get("inputs")
        if isinstance(ins, dict) and ins.get("shapes"):
            ins["shapes"] = [[10**12, 10**12] for _ in ins["shapes"]]
    valid.dump(p, doc)


def run_rank_info_fifo(r: Path) -> None:
    _fifo(r / "rank-0.info.json")


def run_telemetry_meta_fifo(r: Path) -> None:
    _fifo(r / "telemetry-vm.meta.json")


def run_telemetry_file_outside_the_run(r: Path) -> None:
    m = json.loads((r / "telemetry-vm.meta.json").read_text())
    m["file"] = "../../../../etc/passwd"
    (r / "telemetry-vm.meta.json").write_text(json.dumps(m))


def run_telemetry_meta_not_json(r: Path) -> None:
    (r / "telemetry-vm.meta.json").write_text('{"format": "charllm-telemetry-csv", ')


def run_kineto_truncated(r: Path) -> None:
    p = r / "rank-1.kineto.json.gz"
    p.write_bytes(p.read_bytes()[:5000])


def run_kineto_rank_says_0(r: Path) -> None:
    p = r / "rank-1.kineto.json.gz"
    doc = valid.load(p)
    doc["distributedInfo"]["rank"] = 0
    valid.dump(p, doc)


for _fn, _needles in [
    (run_rank_file_fifo, ("rank-1.kineto.json.gz", "FIFO")),
    (run_host_et_fifo, ("rank-0.host_et.json.gz", "FIFO")),
    (run_rank_file_dangling, ("rank-1.kineto.json.gz", "dangling")),
    (run_rank_file_loop, ("loop of symbolic links",)),
    (run_rank_file_directory, ("rank-1.kineto.json.gz", "directory")),
    (run_manifest_fifo, ("manifest.json", "FIFO")),
    (run_manifest_not_json, ("manifest.json",)),
    (run_manifest_deeply_nested, ("manifest.json",)),
    (run_only_rank_1_of_2, ("run", "rank(s) 0 of 0-1", "--allow-partial")),
    (run_manifest_says_world_8, ("manifest.json", "world of 8")),
    (run_manifest_world_size_string, ("manifest.json", "world_size")),
    (run_manifest_version_99, ("manifest.json", "99")),
    (run_host_et_duplicate_ids, ("rank-0.host_et.json.gz", "id")),
    (run_host_et_schema_9, ("rank-0.host_et.json.gz", "9.9.9")),
    (run_host_et_huge_input_dims, ("rank-0", "beyond any real message")),
    (run_kineto_truncated, ("rank-1.kineto.json.gz",)),
    (run_rank_info_fifo, ("rank-0.info.json", "FIFO")),
    (run_telemetry_meta_fifo, ("telemetry-vm.meta.json", "FIFO")),
    (run_telemetry_file_outside_the_run, ("telemetry-vm.meta.json", "must name a file in the run directory")),
    (run_telemetry_meta_not_json, ("telemetry-vm.meta.json", "not valid JSON")),
    (run_kineto_rank_says_0, ("rank",)),
]:
    _run_case(_fn, _needles)


# --- other inputs: --host-et, --baseline --------------------------------------------------------


def _case(name: str, needles: tuple[str, ...]):
    def register(build: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
        CASES.append(Case(name, build, needles))
        return build

    return register


@_case("host-et:fifo/convert", ("h.json", "FIFO"))
def _host_et_fifo(d: Path) -> list[str]:
    os.mkfifo(d / "h.json")
    return ["convert", str(valid.kineto(d)), "--host-et", str(d / "h.json"), "-o", str(d / "o")]


@_case("host-et:symlink_loop/convert", ("h.json", "loop of symbolic links"))
def _host_et_loop(d: Path) -> list[str]:
    (d / "h.json").symlink_to(d / "g.json")
    (d / "g.json").symlink_to(d / "h.json")
    return ["convert", str(valid.kineto(d)), "--host-et", str(d / "h.json"), "-o", str(d / "o")]


@_case("host-et:duplicate_ids/convert", ("h.json", "appears"))
def _host_et_duplicate_ids(d: Path) -> list[str]:
    doc = valid.load(valid.FIXTURE_RUN / "rank-0.host_et.json.gz")
    for n in doc["nodes"]:
        n["id"] = 3
    valid.dump(d / "h.json", doc)
    return ["convert", str(valid.kineto(d)), "--host-et", str(d / "h.json"), "-o", str(d / "o")]


@_case("host-et:kineto_given_as_host_et/convert", ("h.json",))
def _host_et_is_kineto(d: Path) -> list[str]:
    return ["convert", str(valid.kineto(d)), "--host-et", str(valid.kineto(d, "h.json")), "-o", str(d / "o")]


def _baseline(d: Path, change: Callable[[dict[str, Any]], Any]) -> list[str]:
    doc = json.loads(valid.FIXTURE_BASELINE.read_text())
    doc = change(doc) or doc
    b = d / "base.json"
    b.write_text(json.dumps(doc))
    return ["check", str(valid.FIXTURE_RUN), "--baseline", str(b)]


def _set_key(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc[key] = value

    return change


@_case("baseline:fifo/check", ("b.json", "FIFO"))
def _baseline_fifo(d: Path) -> list[str]:
    os.mkfifo(d / "b.json")
    return ["check", str(valid.FIXTURE_RUN), "--baseline", str(d / "b.json")]


@_case("baseline:empty/check", ("b.json",))
def _baseline_empty(d: Path) -> list[str]:
    (d / "b.json").write_text("")
    return ["check", str(valid.FIXTURE_RUN), "--baseline", str(d / "b.json")]


@_case("baseline:not_json/check", ("b.json", "not valid JSON"))
def _baseline_not_json(d: Path) -> list[str]:
    (d / "b.json").write_text('{"format": "charllm-trace-baseline", oops')
    return ["check", str(valid.FIXTURE_RUN), "--baseline", str(d / "b.json")]


def _set_option(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["input"]["options"][key] = value

    return change


for _key, _value in [("energy_method", "magic"), ("hta_compat", "yes"), ("simulate", 1), ("colour", "red")]:
    _case(f"baseline:option_{_key}_{_value}/check", ("base.json", _key))(
        lambda d, k=_key, v=_value: _baseline(d, _set_option(k, v))
    )


for _key, _value in [
    ("input", None),
    ("input", [1]),
    ("version", 99),
    ("metrics", "many"),
    ("metrics", None),
    ("format", "other"),
]:
    _case(f"baseline:{_key}_{str(_value).lower()}/check", ("base.json", _key))(
        lambda d, k=_key, v=_value: _baseline(d, _set_key(k, v))
    )


# --- saved results (analyze --save): zip files ---------------------------------------------------


def _results_zip(d: Path, members: dict[str, bytes]) -> Path:
    import zipfile

    p = d / "res.zip"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return p


for _name, _members, _needles in [
    (
        "zip_bomb",
        {"charllm-results.json": b"{}", "frames/x.arrow": b"\0" * (300 << 20)},
        ("res.zip", "past the limit"),
    ),
    ("zip_without_manifest", {"a.txt": b"hello"}, ("res.zip", "not charllm-trace results")),
    ("zip_manifest_not_json", {"charllm-results.json": b"{oops"}, ("res.zip", "not JSON")),
]:
    for _cmd in ("analyze", "report"):

        def _build(d: Path, m=_members, c=_cmd) -> list[str]:
            p = _results_zip(d, m)
            return [c, str(p)] + (["-o", str(d / "out.html")] if c == "report" else [])

        CASES.append(Case(f"results:{_name}/{_cmd}", _build, _needles))
