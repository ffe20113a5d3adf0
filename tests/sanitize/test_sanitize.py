"""`charllm-trace sanitize`: nothing private left, nothing measured changed, input untouched."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from charllm_trace.cli.app import main
from charllm_trace.core.errors import InputError
from charllm_trace.sanitize import sanitize_run
from charllm_trace.sanitize.rules import ID_BASE
from tests.conftest import shared_trace

HOST_A = "gpu-node-17.cluster.example.org"
HOST_B = "gpu-node-18.cluster.example.org"
USER = "alice_q"
SECRET = "wandb-s3cr3t-7f3a9c2e"
# strings that must not be in any output byte (checked case-insensitively)
REMOVED = [
    HOST_A,
    HOST_B,
    "gpu-node-17",
    "gpu-node-18",
    USER,
    SECRET,
    "/home/",
    "/scratch/",
    "train_llm.py",
    "tmpu3g3sevh",  # the A100 profile's own traceName (/tmp/tmpu3g3sevh.json)
    "module.py(1501)",
    "Python id",
    "Call stack",
    "Enabling GPU tracing",  # Kineto INFO log line
    "MASTER_ADDR",
    "10.11.12.13",
]
TEL_HEADER = "time_ns,device,power_w,energy_j,temp_c,mem_temp_c,sm_clock_mhz,mem_clock_mhz,util_pct,power_limit_w,throttle_reasons\n"


def _gz_json(path: Path, doc: object) -> None:
    path.write_bytes(gzip.compress(orjson.dumps(doc)))


def _read_all(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _small_et(path: Path) -> int:
    """A Chakra ET with private strings in the metadata, node names and attributes."""
    from chakra.schema.protobuf.et_def_pb2 import AttributeProto, GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import encodeMessage

    with open(path, "wb") as f:
        gm = GlobalMetadata(version="0.0.4")
        gm.attr.append(AttributeProto(name="hostname", string_val=HOST_A))
        meta = {"rank": 0, "hostname": HOST_A, "extra": {"env": {"WANDB_API_KEY": SECRET}, "user": USER}}
        gm.attr.append(AttributeProto(name="charllm_meta", string_val=json.dumps(meta)))
        encodeMessage(f, gm)
        for i in range(1, 6):
            n = Node(id=i, name=f"aten::mm_{i}", type=4, start_time_micros=1000 * i, duration_micros=7)
            n.attr.append(
                AttributeProto(name="call_stack", string_val=f"/home/{USER}/train_llm.py(3{i}): step")
            )
            n.attr.append(AttributeProto(name="kernel_file", string_val=f"/scratch/{USER}/k{i}.py"))
            n.attr.append(AttributeProto(name="comm_size", int64_val=4096 * i))
            n.inputs.values = "[[1, 2, 3]]"
            encodeMessage(f, n)
    return 5


def _et_nodes(path: Path) -> list:
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    f = openFileRd(str(path))
    gm = GlobalMetadata()
    decodeMessage(f, gm)
    out = []
    while True:
        n = Node()
        if not decodeMessage(f, n):
            break
        out.append(n)
    f.close()
    return out


def _make_run(root: Path) -> Path:
    run = root / "run"
    run.mkdir()
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "world_size": 2,
                "hostnames": [HOST_A, HOST_B],
                "rank_hosts": {"0": HOST_A, "1": HOST_B},
                "user": USER,
                "command": [
                    "torchrun",
                    "--nproc_per_node",
                    "1",
                    f"/home/{USER}/proj/train_llm.py",
                    f"--data=/scratch/{USER}/tokens",
                    "--lr",
                    "3e-4",
                ],
                "cwd": f"/home/{USER}/proj",
                "env": {
                    "USER": USER,
                    "HOSTNAME": "gpu-node-17",
                    "WANDB_API_KEY": SECRET,
                    "MASTER_ADDR": "10.11.12.13",
                    "NCCL_DEBUG": "INFO",
                },
                "telemetry_hz": 100,
                "parallel": {"tp": 1, "dp": 2},
                "versions": {"torch": "2.13.0", "nccl": "2.21.5"},
            }
        )
    )
    # rank 0: the real A100 DDP profile, plus what a with_stack profile of a user's run holds
    k = orjson.loads(gzip.decompress(shared_trace("hta/a100_ddp_nccl_rank0.json.gz").read_bytes()))
    ev = k["traceEvents"]
    cpu = [e for e in ev if e.get("cat") == "cpu_op"][:50]
    for i, e in enumerate(cpu):
        e.setdefault("args", {})["Call stack"] = (
            f"/home/{USER}/proj/train_llm.py(4{i}): main;torch/nn/modules/module.py(1501): _call_impl"
        )
        ev.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"/home/{USER}/proj/train_llm.py(4{i}): main",
                "pid": e["pid"],
                "tid": e["tid"],
                "ts": e["ts"],
                "dur": e.get("dur", 0),
                "args": {"Python id": 1000 + i, "Python parent id": None},
            }
        )
    ev.append(
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": f"GPU 0 on {HOST_A}"}}
    )
    _gz_json(run / "rank-0.kineto.json.gz", k)
    # rank 1: the linked host ET + Kineto pair, with a hostname in the host ET header
    het = orjson.loads(gzip.decompress(shared_trace("hta/simple_add_host_et.json.gz").read_bytes()))
    het["hostname"] = HOST_B
    _gz_json(run / "rank-1.host_et.json.gz", het)
    (run / "rank-1.kineto.json.gz").write_bytes(shared_trace("hta/simple_add_kineto.json.gz").read_bytes())
    # telemetry as the collector writes it: a CSV and a meta JSON per host, named after the host
    rows = "".join(
        f"{1711964646000000000 + i * 10_000_000},0,{250 + i}.5,{i * 2.5},61,,1410,1215,97,400,0\n"
        for i in range(50)
    )
    (run / f"telemetry-{HOST_A}.csv").write_text(TEL_HEADER + rows)
    (run / f"telemetry-{HOST_A}.meta.json").write_text(
        json.dumps(
            {
                "format": "charllm-telemetry-csv",
                "host": HOST_A,
                "source": "nvml",
                "devices": [{"index": 0, "model": "NVIDIA A100-PG509-200", "uuid": "GPU-1234"}],
                "sampler_cmd": f"/home/{USER}/.venv/bin/python -m charllm_trace.collectors.telemetry",
            }
        )
    )
    (run / "chakra").mkdir()
    _small_et(run / "chakra" / "rank-0.et")
    (run / "notes.bin").write_bytes(b"\x00\x01" + USER.encode())
    (run / "latest.json").symlink_to(run / "manifest.json")  # links are never followed
    return run


def _digest(d: Path) -> dict[str, str]:
    return {
        p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    tmp_path = tmp_path_factory.mktemp("sanitize")
    run = _make_run(tmp_path)
    before = _digest(run)
    out = tmp_path / "clean"
    report = sanitize_run(run, out)
    assert _digest(run) == before, "the input run was modified"
    return run, out, report


def test_nothing_removed_remains_anywhere(made) -> None:
    run, out, report = made
    files = [p for p in out.rglob("*") if p.is_file()]
    names = {p.relative_to(out).as_posix() for p in files}
    assert names == {
        "manifest.json",
        "rank-0.kineto.json.gz",
        "rank-1.host_et.json.gz",
        "rank-1.kineto.json.gz",
        "telemetry-host0.csv",
        "telemetry-host0.meta.json",
        "chakra/rank-0.et",
        ".charllm-trace-sanitized",  # the marker that lets --force replace it (issue 15 item 3)
    }
    assert report.left_out == ["latest.json", "notes.bin"]
    for p in files:
        data = _read_all(p).lower()
        rel = p.relative_to(out).as_posix().lower().encode()
        for s in REMOVED:
            assert s.lower().encode() not in data, f"{s!r} left in {p.name}"
            assert s.lower().encode() not in rel
    # hosts are pseudonymised consistently (which ranks share a node is kept)
    man = json.loads((out / "manifest.json").read_text())
    assert man["hostnames"] == ["host0", "host1"]
    assert man["rank_hosts"] == {"0": "host0", "1": "host1"}
    assert man["user"] == "user"
    assert "env" not in man and "cwd" not in man
    assert man["command"] == ["torchrun", "--nproc_per_node", "1", "<path>", "--data=<path>", "--lr", "3e-4"]
    assert man["parallel"] == {"tp": 1, "dp": 2} and man["versions"]["nccl"] == "2.21.5"
    meta = json.loads((out / "telemetry-host0.meta.json").read_text())
    assert meta["host"] == "host0" and meta["devices"][0]["model"] == "NVIDIA A100-PG509-200"
    het = orjson.loads(_read_all(out / "rank-1.host_et.json.gz"))
    assert het["hostname"] == "host1"
    assert report.python_frames_cleaned == 50
    # two nodes plus MASTER_ADDR; the environment of the manifest and of the ET metadata
    assert report.hosts == 3 and report.users == 1 and report.env_dropped == 2 and report.renamed == 2


def test_measurements_are_kept_exactly(made) -> None:
    run, out, _ = made
    # telemetry numbers: byte for byte
    assert (out / "telemetry-host0.csv").read_bytes() == (run / f"telemetry-{HOST_A}.csv").read_bytes()
    # Kineto: every event the same but for the dropped stack args, the Python frames' paths and
    # the process/thread ids (remapped in order, issue 15 item 6)
    a = orjson.loads(_read_all(run / "rank-0.kineto.json.gz"))
    b = orjson.loads(_read_all(out / "rank-0.kineto.json.gz"))
    to: dict[int, int] = {}  # original id -> its pseudonym, learnt below: must be one map, in order
    assert a["deviceProperties"] == b["deviceProperties"]
    assert a["distributedInfo"] == b["distributedInfo"]
    assert a["baseTimeNanoseconds"] == b["baseTimeNanoseconds"]
    assert "traceName" not in b and "INFO" not in b
    ea = [e for e in a["traceEvents"] if e.get("cat") != "python_function"]
    eb = [e for e in b["traceEvents"] if e.get("cat") != "python_function"]
    assert len(ea) == len(eb) == len(a["traceEvents"]) - 50
    pa = [e for e in a["traceEvents"] if e.get("cat") == "python_function"]
    pb = [e for e in b["traceEvents"] if e.get("cat") == "python_function"]
    assert [(e["ts"], e["dur"]) for e in pa] == [(e["ts"], e["dur"]) for e in pb]
    assert pb[0]["name"] == "<path>(40): main"
    changed = 0
    for x, y in zip(ea, eb, strict=True):
        for k in ("pid", "tid"):
            if (
                type(x.get(k)) is int
                and x[k] >= 100
                and x.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
            ):
                assert to.setdefault(x[k], y[k]) == y[k] >= ID_BASE
        x = {k: (to.get(v, v) if k in ("pid", "tid") else v) for k, v in x.items()}
        x_args = {k: v for k, v in (x.get("args") or {}).items() if k != "Call stack"}
        if "sort_index" in x_args:  # process/thread sort index: the pid or tid itself
            x_args["sort_index"] = to.get(x_args["sort_index"], x_args["sort_index"])
        if x.get("name") == "thread_name" and isinstance(x_args.get("name"), str):
            x_args["name"] = re.sub(r"\d{3,}", lambda m: str(to.get(int(m[0]), m[0])), x_args["name"])
        if x.get("name") == "process_labels" and "on" in str(x_args.get("labels")):
            x_args["labels"] = x_args["labels"].replace(HOST_A, "host0")
        changed += x != y
        assert {k: v for k, v in x.items() if k != "args"} == {k: v for k, v in y.items() if k != "args"}
        assert x_args == (y.get("args") or {}), x
    assert changed >= 51  # the 50 events with a call stack, the process label, all CPU events' ids
    assert to and sorted(to) == sorted(to, key=to.__getitem__) and len(set(to.values())) == len(to)
    # kernels (what the analyses read) are identical, with their collective args
    ka = [e for e in ea if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]  # pid: GPU index
    assert ka == [e for e in eb if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert sum(1 for e in ka if "Collective name" in e.get("args", {})) == 21
    # host ET nodes unchanged
    ha = orjson.loads(gzip.decompress(shared_trace("hta/simple_add_host_et.json.gz").read_bytes()))
    hb = orjson.loads(_read_all(out / "rank-1.host_et.json.gz"))
    assert ha["nodes"] == hb["nodes"]
    # the untouched Kineto file keeps every event
    ka1 = orjson.loads(_read_all(run / "rank-1.kineto.json.gz"))
    kb1 = orjson.loads(_read_all(out / "rank-1.kineto.json.gz"))
    ids = ("pid", "tid")
    assert len(ka1["traceEvents"]) == len(kb1["traceEvents"])
    for x, y in zip(ka1["traceEvents"], kb1["traceEvents"], strict=True):  # all but the process/thread ids
        if x.get("ph") != "M":  # metadata events hold the ids in their args (sort index, thread name)
            assert {k: v for k, v in x.items() if k not in ids} == {
                k: v for k, v in y.items() if k not in ids
            }
        assert all(not (100 <= y[k] < ID_BASE) for k in ids if type(y.get(k)) is int), y
    # Chakra ET: same nodes, times and numbers; stack attrs gone, paths replaced
    na, nb = _et_nodes(run / "chakra" / "rank-0.et"), _et_nodes(out / "chakra" / "rank-0.et")
    assert [(n.id, n.name, n.type, n.start_time_micros, n.duration_micros, n.inputs.values) for n in na] == [
        (n.id, n.name, n.type, n.start_time_micros, n.duration_micros, n.inputs.values) for n in nb
    ]
    for n in nb:
        attrs = {a.name: a for a in n.attr}
        assert "call_stack" not in attrs
        assert attrs["kernel_file"].string_val == "<path>"
        assert attrs["comm_size"].int64_val == 4096 * n.id


def _same(a: object, b: object, where: str = "") -> None:
    """Deep equality of analysis results: dataclasses, dicts, lists and polars frames."""
    import dataclasses

    import polars as pl

    if isinstance(a, pl.DataFrame):
        assert isinstance(b, pl.DataFrame) and a.equals(b, null_equal=True), where
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


def _converted(made):  # -> list of (before, after) Runs
    pytest.importorskip("charllm_trace.converters.run_dir")
    from charllm_trace.converters.run_dir import convert_file

    run, out, _ = made
    return [
        (convert_file(run / n), convert_file(out / n))
        for n in ("rank-0.kineto.json.gz", "rank-1.kineto.json.gz")
    ]


def test_converted_models_identical_before_and_after(made) -> None:
    for ra, rb in _converted(made):
        for ta, tb in zip(ra, rb, strict=True):
            # GPU work, collectives and steps (what every analysis reads) are identical
            ga = (
                ta.nodes.filter(ta.nodes["on_gpu"]).drop("id", "parent", "launch_id").sort("start_ns", "name")
            )
            gb = (
                tb.nodes.filter(tb.nodes["on_gpu"]).drop("id", "parent", "launch_id").sort("start_ns", "name")
            )
            assert ga.height > 0 and ga.equals(gb, null_equal=True)
            assert ta.steps().equals(tb.steps())
            assert ta.meta.process_groups == tb.meta.process_groups
            assert ta.meta.device_model == tb.meta.device_model


def test_analyses_identical_before_and_after(made) -> None:
    import charllm_trace.analysis as analysis

    pairs = _converted(made)
    if not hasattr(analysis, "analyze_run"):
        pytest.skip("charllm_trace.analysis.analyze_run is not there yet")
    from charllm_trace.regress.api import analyze

    for ra, rb in pairs:
        rb.source = ra.source  # where each was read from is the one thing that differs
        _same(analyze(ra), analyze(rb), "analysis")


def test_refuses_existing_output_and_bad_places(tmp_path: Path) -> None:
    run = _make_run(tmp_path)
    out = tmp_path / "clean"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="already exists"):
        sanitize_run(run, out)
    assert (out / "keep.txt").read_text() == "mine"
    with pytest.raises(InputError, match="outside the input"):
        sanitize_run(run, run / "inner")
    with pytest.raises(InputError, match="no such file"):
        sanitize_run(tmp_path / "nope", tmp_path / "x")
    r = CliRunner().invoke(main, ["sanitize", str(run), "-o", str(out)])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "already exists" in r.output
    # --force never replaces a directory sanitize did not write (issue 15 item 3)
    r = CliRunner().invoke(main, ["sanitize", str(run), "-o", str(out), "--force"])
    assert r.exit_code == 2 and "not written by sanitize" in r.output
    assert (out / "keep.txt").read_text() == "mine"
    out = tmp_path / "clean2"
    assert CliRunner().invoke(main, ["sanitize", str(run), "-o", str(out)]).exit_code == 0
    r = CliRunner().invoke(main, ["sanitize", str(run), "-o", str(out), "--force", "--redact", "3e-4"])
    assert r.exit_code == 0, r.output
    assert "3e-4" not in (out / "manifest.json").read_text()
    assert "left out" in r.output and "notes.bin" in r.output


def test_corrupt_input_is_a_one_line_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text('{"hostnames": [')
    r = CliRunner().invoke(main, ["sanitize", str(run), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert re.match(r"error: .*manifest\.json: not valid JSON", r.output)
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.")]  # no temporary left behind


def test_single_kineto_file_with_python_frames(tmp_path: Path) -> None:
    src = shared_trace("tracelens/h100_qwen1.5-0.5b_inference.json.gz")
    out = tmp_path / "clean.json.gz"
    sanitize_run(src, out)
    a = orjson.loads(gzip.decompress(src.read_bytes()))
    b = orjson.loads(_read_all(out))
    n_py = sum(1 for e in a["traceEvents"] if e.get("cat") == "python_function")
    assert n_py > 1000
    # the Python frames are kept (dropping them changes CPU leaf ops), without their file paths
    assert len(b["traceEvents"]) == len(a["traceEvents"])
    assert sum(1 for e in b["traceEvents"] if e.get("cat") == "python_function") == n_py
    data = _read_all(out)
    host = a["metadata"]["system"]["uname"]["node"].encode()  # the profiled container's host name
    assert host not in data and b"Python id" not in data and b".py(" not in data
    assert b["metadata"]["system"]["uname"]["node"] == "host0"
    assert b["metadata"]["started_by"] == "user"
    assert b["deviceProperties"] == a["deviceProperties"]
    ka = [e for e in a["traceEvents"] if e.get("cat") == "kernel"]
    assert ka == [e for e in b["traceEvents"] if e.get("cat") == "kernel"]


def test_collected_run_from_our_collector(tmp_path: Path) -> None:
    """The collector's own 2-rank CPU run: its host is pseudonymised everywhere (file names,
    manifest keys such as ranks_by_host) and every analysis of the run dir is unchanged."""
    from charllm_trace.analysis import AnalyzeOptions, analyze_run
    from charllm_trace.inputs import loader
    from tests.conftest import FIXTURES

    src = FIXTURES / "cpu-2rank-gloo"
    man = json.loads((src / "manifest.json").read_text())
    hosts = man["hostnames"]
    out = tmp_path / "clean"
    report = sanitize_run(src, out)
    assert report.hosts == len(hosts)
    expected = sorted(
        p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file() and p.suffix != ".md"
    )
    renamed = [
        re.sub(rf"(?<![A-Za-z0-9]){re.escape(h)}(?![A-Za-z0-9])", f"host{i}", n)
        for n in expected
        for i, h in enumerate(hosts[:1])
    ]
    assert sorted(report.written) == sorted(renamed)
    for p in out.rglob("*"):
        data = _read_all(p).decode("utf-8", "replace") + p.name
        for h in hosts:
            assert not re.search(rf"(?<![A-Za-z0-9_]){re.escape(h)}(?![A-Za-z0-9_])", data, re.I), (h, p.name)
    clean = json.loads((out / "manifest.json").read_text())
    assert clean["ranks_by_host"] == {"host0": man["ranks_by_host"][hosts[0]]}
    a, b = loader.load(src), loader.load(out)
    b.source = a.source
    opts = AnalyzeOptions(per_step=True)
    _same(analyze_run(a, opts), analyze_run(b, opts), "analysis")


def test_host_named_only_in_a_big_profile_is_removed_from_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Big profiles are parsed once (pass 2); a host first seen there sends pass 2 round again."""
    import charllm_trace.sanitize as san

    monkeypatch.setattr(san, "_BIG", 200)  # every profile below counts as big
    run = tmp_path / "run"
    run.mkdir()
    (run / "a_notes.json").write_text(json.dumps({"comment": "ran on ab5ece529443 overnight"}))
    (run / "z_profile.json").write_text(
        json.dumps(
            {"metadata": {"system": {"uname": {"node": "ab5ece529443"}}}, "traceEvents": [{"ph": "X"}] * 50}
        )
    )
    sanitize_run(run, tmp_path / "o")
    assert json.loads((tmp_path / "o" / "a_notes.json").read_text()) == {"comment": "ran on host0 overnight"}
    assert b"ab5ece529443" not in (tmp_path / "o" / "z_profile.json").read_bytes()
