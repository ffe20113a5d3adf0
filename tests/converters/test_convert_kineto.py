"""Kineto-only conversion on real profiles: counts, times, tree, launches and collectives,
each checked against figures taken independently from the raw JSON."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.converters.build import kineto_trace
from charllm_trace.converters.kineto import read_kineto
from charllm_trace.core.errors import InputError
from charllm_trace.inputs.loader import load
from tests.conftest import shared_trace
from tests.helpers.kineto_files import KINETO_FILES

# Kineto category -> our kind (written out here, independently of the converter's table)
EXPECTED_KIND = {
    "cpu_op": "cpu_op",
    "python_function": "cpu_op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "gpu_user_annotation": "gpu_annotation",
}


def raw(rel: str) -> dict:
    """The profile parsed with exact decimals (so our ns conversion is checked exactly)."""
    p = shared_trace(rel)
    with gzip.open(p, "rt") as fh:
        return json.load(fh, parse_float=Decimal)


def x_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]


@pytest.fixture(scope="module")
def converted() -> dict:
    cache: dict = {}

    def get(rel: str):
        if rel not in cache:
            cache[rel] = kineto_trace(read_kineto(shared_trace(rel)))
        return cache[rel]

    return get


@pytest.mark.parametrize("rel", KINETO_FILES)
def test_node_counts_per_kind_match_the_json(rel: str, converted) -> None:
    doc = raw(rel)
    xs = x_events(doc)
    trace, report = converted(rel)
    assert trace.nodes.height == len(xs)
    want: dict[str, int] = {}
    for e in xs:
        k = EXPECTED_KIND.get(e.get("cat"), "other")
        want[k] = want.get(k, 0) + 1
    got = dict(trace.nodes.group_by("kind").len().iter_rows())
    assert got == want
    # GPU nodes carry a device and a stream, CPU nodes a thread
    gpu = trace.nodes.filter(pl.col("on_gpu"))
    assert gpu["device"].null_count() == 0 and gpu["stream"].null_count() == 0
    assert (
        trace.nodes.filter(~pl.col("on_gpu"))["device"].null_count()
        == trace.nodes.filter(~pl.col("on_gpu")).height
    )
    assert report["nodes"] == len(xs)


@pytest.mark.parametrize("rel", KINETO_FILES)
def test_times_are_exact_unix_ns(rel: str, converted) -> None:
    doc = raw(rel)
    base = int(doc.get("baseTimeNanoseconds", 0))
    xs = x_events(doc)
    want_start = sorted(base + int((Decimal(e["ts"]) * 1000).to_integral_value()) for e in xs)
    want_dur = sorted(int((Decimal(e.get("dur", 0)) * 1000).to_integral_value()) for e in xs)
    trace, _ = converted(rel)
    assert sorted(trace.nodes["start_ns"].to_list()) == want_start
    assert sorted(trace.nodes["dur_ns"].to_list()) == want_dur
    # all on the Unix clock: after 2017 and before 2100
    assert trace.nodes["start_ns"].min() > 1_483_228_800 * 10**9
    assert trace.nodes["start_ns"].max() < 4_102_444_800 * 10**9


@pytest.mark.parametrize("rel", KINETO_FILES)
def test_parents_enclose_children_on_the_same_thread(rel: str, converted) -> None:
    trace, _ = converted(rel)
    n = trace.nodes
    j = n.filter(pl.col("parent").is_not_null()).join(
        n.select(
            pl.col("id").alias("parent"),
            pl.col("start_ns").alias("ps"),
            pl.col("dur_ns").alias("pd"),
            pl.col("tid").alias("ptid"),
            pl.col("pid").alias("ppid"),
            pl.col("on_gpu").alias("pgpu"),
        ),
        on="parent",
    )
    assert j.height == n["parent"].drop_nulls().len()
    assert (j["ps"] <= j["start_ns"]).all()
    assert (j["ps"] + j["pd"] >= j["start_ns"] + j["dur_ns"]).all()
    assert (j["tid"] == j["ptid"]).all() and (j["pid"] == j["ppid"]).all() and (~j["pgpu"]).all()
    assert n.filter(pl.col("on_gpu"))["parent"].null_count() == n.filter(pl.col("on_gpu")).height
    # the control edges are exactly the parent links plus the launch links
    d = trace.deps
    assert (d["kind"] == "ctrl").all()
    n_launch = n.filter(
        pl.col("launch_id").is_not_null()
        & (pl.col("launch_id") != pl.col("id"))
        & (pl.col("parent").is_null() | (pl.col("launch_id") != pl.col("parent")))
    ).height
    assert d.unique().height == d.height
    assert d.height == n["parent"].drop_nulls().len() + n_launch


def test_innermost_parent_by_brute_force(converted) -> None:
    """On a small real profile, compare with a brute-force innermost-enclosing-event search."""
    rel = "hta/mi250_minitoy_kineto.json.gz"
    trace, _ = converted(rel)
    n = trace.nodes.filter(~pl.col("on_gpu")).to_dicts()
    for c in n:
        encl = [
            p
            for p in n
            if p["id"] != c["id"]
            and p["tid"] == c["tid"]
            and p["pid"] == c["pid"]
            and p["start_ns"] <= c["start_ns"]
            and p["start_ns"] + p["dur_ns"] >= c["start_ns"] + c["dur_ns"]
            and not (p["start_ns"] == c["start_ns"] and p["dur_ns"] == c["dur_ns"] and p["id"] > c["id"])
        ]
        want = min(encl, key=lambda p: (p["dur_ns"], -p["start_ns"]))["id"] if encl else None
        assert c["parent"] == want, c["name"]


@pytest.mark.parametrize("rel", KINETO_FILES)
def test_gpu_nodes_launched_by_their_runtime_call(rel: str, converted) -> None:
    doc = raw(rel)
    xs = x_events(doc)
    rt_corr = {
        e["args"]["correlation"]
        for e in xs
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    gpu = [e for e in xs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    want_linked = sum(1 for e in gpu if e.get("args", {}).get("correlation") in rt_corr)
    trace, report = converted(rel)
    assert report["gpu_linked_by_correlation"] == want_linked
    n = trace.nodes
    k = n.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]) & pl.col("launch_id").is_not_null())
    rt = n.filter(pl.col("kind") == "runtime").select(
        "correlation", pl.col("id").alias("rt"), pl.col("parent").alias("rt_parent")
    )
    j = k.join(rt, on="correlation", how="inner")
    assert j.height == want_linked
    # launch_id = the op enclosing the runtime call, or the runtime call itself at top level
    assert (j["launch_id"] == j["rt_parent"].fill_null(j["rt"])).all()


def test_a100_collectives_match_kernel_args_exactly(converted) -> None:
    rel = "hta/a100_ddp_nccl_rank0.json.gz"
    doc = raw(rel)
    size = {"Float": 4, "Long": 8, "Int": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Byte": 1, "Char": 1}
    name = {
        "allreduce": "all_reduce",
        "broadcast": "broadcast",
        "allgather": "all_gather",
        "reduce_scatter": "reduce_scatter",
    }
    want = {}
    for e in x_events(doc):
        a = e.get("args", {})
        if e.get("cat") == "kernel" and "Collective name" in a:
            ct = name[a["Collective name"]]
            n = a["Out msg nelems"] if ct == "all_gather" else a["In msg nelems"]
            want[a["correlation"]] = (
                ct,
                n * size[a["dtype"]],
                n,
                a["Process Group Name"],
                json.loads(a["Process Group Ranks"]),
            )
    assert len(want) == 21
    trace, report = converted(rel)
    comm = trace.nodes.filter(pl.col("node_type").str.starts_with("COMM"))
    assert comm.height == 21 and report["comm_nodes"] == 21
    got = {r["correlation"]: r for r in comm.to_dicts()}
    assert set(got) == set(want)
    for corr, (ct, nbytes, n, pg, ranks) in want.items():
        g = got[corr]
        assert (g["coll_type"], g["comm_bytes"], g["num_elems"], g["pg_name"]) == (ct, nbytes, n, pg)
        assert trace.meta.group(pg).ranks == tuple(ranks)
    # sequence numbers: 0..20 in launch order within the one group
    assert sorted(comm["coll_seq"].to_list()) == list(range(21))
    assert trace.meta.process_groups[0].desc == "default_pg"
    assert trace.meta.device_model == "NVIDIA A100-PG509-200" and trace.meta.rank == 0
    assert trace.meta.world_size == 2
    # ProfilerStep annotations are kept, as annotation nodes
    steps = trace.steps()
    assert steps["step"].to_list() == [4, 5, 6]


@pytest.mark.parametrize(
    "rel", ["hta/trace_filter_2ranks/rank-0.json.gz", "param/dlrm_8ranks_v100/kineto_rank0.json.gz"]
)
def test_collectives_without_kernel_args_use_the_nccl_annotation(rel: str, converted) -> None:
    """Older profiles: NCCL kernels have no size args; the enclosing ``nccl:<op>`` annotation
    (``Input Dims`` x ``Input type``) gives the size. Checked by a brute-force search here."""
    doc = raw(rel)
    xs = x_events(doc)
    esize = {
        "float": 4,
        "long": 8,
        "long int": 8,
        "int": 4,
        "signed char": 1,
        "unsigned char": 1,
        "double": 8,
        "c10::Half": 2,
    }
    rt = {e["args"]["correlation"]: e for e in xs if e.get("cat") == "cuda_runtime"}
    ops = [e for e in xs if e.get("cat") in ("cpu_op", "user_annotation")]
    want = {}
    for k in xs:
        if k.get("cat") != "kernel" or "nccl" not in k["name"]:
            continue
        r = rt[k["args"]["correlation"]]
        encl = [
            o
            for o in ops
            if o["tid"] == r["tid"] and o["ts"] <= r["ts"] and o["ts"] + o["dur"] >= r["ts"] + r["dur"]
        ]
        ann = min((o for o in encl if o["name"].startswith("nccl:")), key=lambda o: o["dur"])
        ct = {
            "nccl:all_reduce": "all_reduce",
            "nccl:all_to_all": "all_to_all",
            "nccl:_all_gather_base": "all_gather",
        }[ann["name"]]
        if ct == "all_gather":  # whole output = the c10d op's first (output) tensor
            c10d = min((o for o in encl if o["name"].startswith("c10d::")), key=lambda o: o["dur"])
            n = c10d["args"]["Input Dims"][0][0]
            ty = c10d["args"]["Input type"][0]
        else:
            n = 1
            for d in ann["args"]["Input Dims"][0]:
                n *= d
            ty = ann["args"]["Input type"][0]
        want[k["args"]["correlation"]] = (ct, n * esize[ty])
    trace, _ = converted(rel)
    comm = trace.nodes.filter(pl.col("node_type").str.starts_with("COMM"))
    got = {r["correlation"]: (r["coll_type"], r["comm_bytes"]) for r in comm.to_dicts()}
    assert got == want and len(want) > 0


def test_amd_profile_devices_and_model(converted) -> None:
    trace, _ = converted("tracelens/mi300_qwen1.5-0.5b_inference.json.gz")
    assert trace.meta.device_model == "AMD Instinct MI300X VF"
    assert trace.nodes.filter(pl.col("kind") == "kernel")["device"].unique().to_list() == [2]
    trace, _ = converted("tracelens/h100_qwen1.5-0.5b_inference.json.gz")
    assert trace.meta.device_model == "NVIDIA H100 80GB HBM3"
    assert trace.steps().height >= 1


def test_loader_converts_a_kineto_file() -> None:
    p = shared_trace("hta/mi250_minitoy_kineto.json.gz")
    run = load(p)
    assert run.ranks == [0]
    assert run.traces[0].meta.source == "kineto"


def _write(tmp: Path, name: str, data: bytes) -> Path:
    p = tmp / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        (
            "trunc.json.gz",
            gzip.compress(b'{"traceEvents": [' + b'{"ph":"X"},' * 500 + b"{}]}", mtime=0)[:60],
            "gzip",
        ),
        ("notjson.json", b"this is not json {", "not valid JSON"),
        ("cut.json", b'{"traceEvents": [{"ph": "X", "ts": 1', "not valid JSON"),
        ("list.json", b"[1, 2, 3]", "expected an object"),
        ("other.json", b'{"hello": "world"}', "neither a Kineto profile"),
        ("empty.json", b"", "empty"),
    ],
)
def test_corrupt_files_give_one_line_input_errors(tmp_path: Path, name: str, data: bytes, words: str) -> None:
    p = _write(tmp_path, name, data)
    with pytest.raises(InputError) as ei:
        load(p)
    msg = ei.value.one_line()
    assert words in msg and "\n" not in msg and str(p) in msg


@pytest.mark.parametrize(
    "rel",
    [
        "hta/a100_ddp_nccl_rank0.json.gz",
        "tracelens/mi300_qwen1.5-0.5b_inference.json.gz",
        "param/dlrm_8ranks_v100/kineto_rank1.json.gz",
    ],
)
def test_fast_reader_equals_the_plain_json_reader(rel: str) -> None:
    """read_kineto (msgspec, in batches) gives exactly what parsing the whole JSON with orjson gives."""
    from charllm_trace.converters._io import load_json
    from charllm_trace.converters.kineto import parse_kineto

    p = shared_trace(rel)
    a, b = read_kineto(p), parse_kineto(load_json(p), p)
    assert a.events.equals(b.events, null_equal=True)
    assert a.comm_args == b.comm_args
    assert (a.rank, a.world_size, a.pg_config, a.device_properties, a.base_ns, a.n_raw_events) == (
        b.rank,
        b.world_size,
        b.pg_config,
        b.device_properties,
        b.base_ns,
        b.n_raw_events,
    )
