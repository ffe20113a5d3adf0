"""Bad run directories, --host-et files, baselines and saved results."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bad_inputs import valid
from tests.bad_inputs.registry import (
    CASES,
    Case,
    _fifo,
    bad_input,
)

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


def run_ranks_of_two_collections(r: Path) -> None:
    """Rank 1's profile from a collection an hour later (no run ids to tell: issue 28)."""
    import gzip

    p = r / "rank-1.kineto.json.gz"
    doc = json.loads(gzip.decompress(p.read_bytes()))
    doc["baseTimeNanoseconds"] += 3600 * 10**9
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))


_run_case(run_ranks_of_two_collections, ("run", "two collections"), only=("info", "analyze", "convert"))
