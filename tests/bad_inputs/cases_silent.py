"""Inputs that were accepted silently (exit 0, nothing said: issue 28, round 3), each now one line,
exit 2: Kineto events without a name or pid, with a name, tid or id of the wrong type, or launch ids
that repeat; host ETs whose nodes are not objects, whose fields have the wrong type, or whose parents
form a cycle; Chakra ETs with a start before 1970 or a node type past the enum; a folder of our ETs
with one of Chakra's converter; and a trace past the event limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bad_inputs import valid
from tests.bad_inputs.registry import CASES, Case, _events, bad_input

# --- Kineto profiles ----------------------------------------------------------------------------


def _first(ev: list[dict[str, Any]], cat: str) -> dict[str, Any]:
    return next(e for e in ev if e.get("cat") == cat)


def _all_ids_one(ev: list[dict[str, Any]]) -> None:
    for e in ev:
        for key in ("External id", "correlation"):
            if key in e.get("args", {}):
                e["args"][key] = 1


_KINETO: list[tuple[str, Callable[[list[dict[str, Any]]], Any], tuple[str, ...]]] = [
    ("no_name", lambda ev: _first(ev, "kernel").pop("name"), ("has no name",)),
    ("no_pid", lambda ev: _first(ev, "cpu_op").pop("pid"), ("1 of 14", "no integer pid")),
    ("name_an_integer", lambda ev: _first(ev, "kernel").update(name=12345), ("name is 12345",)),
    ("tid_a_string", lambda ev: _first(ev, "cpu_op").update(tid="main"), ("tid is 'main'",)),
    ("all_ids_equal", _all_ids_one, ("correlation id 1 is shared by 4 runtime calls",)),
    (
        "external_id_a_string",
        lambda ev: _first(ev, "cpu_op")["args"].update({"External id": "abc"}),
        ("External id", "'abc'", "expected an integer"),
    ),
]
for _name, _mutate, _needles in _KINETO:

    def _make(d: Path, m=_mutate) -> Path:
        return _events(d, m)

    _make.__name__ = f"kineto_{_name}"
    bad_input("kineto", ("rank-0.json", *_needles))(_make)


# --- host ETs, in the collected run -------------------------------------------------------------


def _host(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        run = valid.run_dir(d)
        p = run / "rank-0.host_et.json.gz"
        doc = valid.load(p)
        change(doc)
        valid.dump(p, doc)
        return run

    return make


def _cycle(doc: dict[str, Any]) -> None:
    a, b = doc["nodes"][1], doc["nodes"][2]
    a["ctrl_deps"], b["ctrl_deps"] = b["id"], a["id"]


def _inputs_text(doc: dict[str, Any]) -> None:
    doc["nodes"][1]["inputs"] = "abc"


def _rf_id_text(doc: dict[str, Any]) -> None:
    for a in doc["nodes"][5]["attrs"]:
        if a["name"] == "rf_id":
            a["value"] = "abc"


_HOST = [
    ("host_et_control_cycle", _cycle, ("rank-0.host_et.json.gz", "form a cycle")),
    ("host_et_nodes_not_objects", lambda doc: doc["nodes"].extend([1, "x", None]),
     ("rank-0.host_et.json.gz", "3 of 4,902 host ET nodes are not objects")),
    ("host_et_parent_1e30", lambda doc: doc["nodes"][3].update(ctrl_deps=1e30),
     ("rank-0.host_et.json.gz", "ctrl_deps is 1e+30")),
    ("host_et_inputs_a_string", _inputs_text, ("rank-0.host_et.json.gz", "inputs is 'abc'")),
    ("host_et_rf_id_a_string", _rf_id_text, ("rank-0.host_et.json.gz", "rf_id is 'abc'")),
]  # fmt: skip
for _name, _change, _needles in _HOST:
    _m = _host(_change)
    _m.__name__ = f"run_{_name}"
    bad_input("run", _needles)(_m)


# --- Chakra ETs ---------------------------------------------------------------------------------

_GRAPH_CMDS = ("info", "analyze", "report", "perfetto", "astra-sim")


def _et_nodes(d: Path, **cols: list[int]) -> Path:
    import polars as pl

    from charllm_trace.et.writer import write_et
    from tests.et.test_et_roundtrip import small_trace

    t = small_trace()
    t.nodes = t.nodes.with_columns(*(pl.Series(k, v, dtype=pl.Int64) for k, v in cols.items()))
    p = d / "rank-0.et"
    write_et(t, p)
    return p


@bad_input("et", ("rank-0.et", "negative start", "before 1970"), only=_GRAPH_CMDS)
def et_negative_start(d: Path) -> Path:  # issue 28: ShapeError (exit 3), then accepted silently
    return _et_nodes(d, start_ns=[-5_000_000, 1, 2, 3])


@bad_input("et", ("rank-0.et", "negative start"), only=_GRAPH_CMDS)
def et_starts_2_62_apart_with_huge_durations(d: Path) -> Path:  # numpy RuntimeWarning, then exit 3
    return _et_nodes(d, start_ns=[-(2**62), -(2**62), 2**62, 2**62], dur_ns=[2**61] * 4)


@bad_input("et", ("rank-0.et", "no Chakra node type"), only=_GRAPH_CMDS)
def et_node_type_99(d: Path) -> Path:
    from charllm_trace.et import schema as pb
    from tests.bad_inputs import et_edit

    p = valid.et(d)
    msgs = et_edit._messages(p)
    n = pb.Node()
    n.ParseFromString(msgs[1])
    n.type = 99
    msgs[1] = n.SerializeToString()
    return et_edit._write(p, msgs)


def _foreign_beside_ours(d: Path) -> Path:
    """rank-0.et of ours and rank-1.et as Chakra's converter writes one (no charllm metadata)."""
    from chakra.schema.protobuf import et_def_pb2 as cpb
    from chakra.src.third_party.utils.protolib import encodeMessage

    ets = d / "ets"
    ets.mkdir()
    valid.et(ets, "rank-0.et")
    with open(ets / "rank-1.et", "wb") as f:
        encodeMessage(f, cpb.GlobalMetadata(version="0.0.4"))
        encodeMessage(f, cpb.Node(id=1, name="aten::mm", type=cpb.COMP_NODE, duration_micros=7))
    return ets


for _cmd in ("info", "analyze", "report"):

    def _build(d: Path, c=_cmd) -> list[str]:
        ets = _foreign_beside_ours(d)
        return [c, str(ets)] + (["-o", str(d / "out.html")] if c == "report" else [])

    CASES.append(
        Case(f"et-dir:ours_and_chakras/{_cmd}", _build, ("rank-1.et", "mixes two runs", "rank-0.et"))
    )


# --- the event limit (a small limit, not a huge file) ------------------------------------------


def _over_the_limit(kind: str, limit: int) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        import os

        os.environ["CHARLLM_TRACE_MAX_EVENTS"] = str(limit)  # the runner clears it before each case
        p = valid.kineto(d) if kind == "kineto" else valid.et(d)
        return ["analyze", str(p)]

    return build


CASES.append(Case("limit:kineto_past_max_events/analyze", _over_the_limit("kineto", 10),
                  ("rank-0.json", "past the limit of 10", "CHARLLM_TRACE_MAX_EVENTS")))  # fmt: skip
CASES.append(Case("limit:et_past_max_events/analyze", _over_the_limit("et", 2),
                  ("rank-0.et", "nodes (declared in the header): at least 4", "CHARLLM_TRACE_MAX_EVENTS")))  # fmt: skip
