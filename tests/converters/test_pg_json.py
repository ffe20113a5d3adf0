"""The ``## process_group:init ##`` node carries PyTorch's process-group JSON exactly as PyTorch
wrote it, in the form Chakra's converter writes and ASTRA-sim parses (issue 10, item 6).

ASTRA-sim (``Workload::issue_pytorch_pg_metadata``) takes the node's ``inputs.values`` string,
keeps ``substr(2, size - 4)`` and ``json::parse``\\ s it: the Python equivalent is
``json.loads(v[2:len(v) - 2])``. Earlier versions wrote the values list as JSON
(``["[{\\"pg_name\\": ...}]"]``), escaping the description a second time.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import polars as pl
import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

from charllm_trace.converters.host_et import PG_INIT, pg_init_groups, pg_init_values, read_host_et
from charllm_trace.converters.run_dir import convert_pair
from charllm_trace.core.model import ProcessGroup
from charllm_trace.et.reader import read_et
from charllm_trace.et.writer import write_et

RUN = Path(__file__).parents[1] / "fixtures" / "traces" / "cpu-2rank-gloo"
GROUPS = (ProcessGroup(name="0", desc="default_pg", ranks=(0, 1)),)


def _pytorch_pg_text(rank: int = 0) -> str:
    """The process-group JSON text exactly as PyTorch wrote it in the host ET."""
    doc = orjson.loads(gzip.decompress((RUN / f"rank-{rank}.host_et.json.gz").read_bytes()))
    (node,) = [n for n in doc["nodes"] if n["name"] == PG_INIT]
    (text,) = node["inputs"]["values"]
    assert isinstance(text, str)
    return text


def _astra_sim_parse(values: str) -> list[dict]:
    """ASTRA-sim: ``pg_info.substr(2, pg_info.size() - 4)`` then ``json::parse``."""
    return json.loads(values[2 : 2 + len(values) - 4])


def _pg_node_values(et_path: Path) -> str:
    """``inputs.values`` of the process-group node, read from the file as protobuf (as a feeder does)."""
    f = openFileRd(str(et_path))
    try:
        gm = pb.GlobalMetadata()
        decodeMessage(f, gm)
        node = pb.Node()
        found = []
        while decodeMessage(f, node):
            if node.name == PG_INIT:
                found.append(node.inputs.values)
    finally:
        f.close()
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory):
    """Rank 0 of the gloo fixture (host ET + Kineto), written as an ET."""
    trace, _ = convert_pair(RUN / "rank-0.host_et.json.gz", RUN / "rank-0.kineto.json.gz")
    out = tmp_path_factory.mktemp("pg") / "rank-0.et"
    write_et(trace, out)
    return trace, out


def test_pg_values_keep_pytorchs_json_byte_for_byte() -> None:
    text = _pytorch_pg_text()
    host = read_host_et(RUN / "rank-0.host_et.json.gz")
    (values,) = host.nodes.filter(pl.col("name") == PG_INIT)["inputs"].struct.field("values").to_list()
    assert values == "['" + text + "']" == pg_init_values(text)
    assert values[2:-2] == text  # no second escaping: PyTorch's bytes, unchanged
    assert '\\"' not in values


def test_written_et_parses_with_astra_sims_rule(linked) -> None:
    trace, path = linked
    text = _pytorch_pg_text()
    values = _pg_node_values(path)
    # the C++ substr(2, size - 4) is Python's [2:-2] for these strings: two characters off each end
    assert values[:2] == "['" and values[-2:] == "']" and values[2:-2] == text
    groups = _astra_sim_parse(values)
    assert groups == json.loads(text)
    assert [(g["pg_name"], g["ranks"], g["group_size"]) for g in groups] == [("0", [], 2)]
    # ranks [] is the default group: ASTRA-sim takes every NPU, as we do
    assert trace.meta.process_groups == GROUPS


def test_same_bytes_as_chakras_converter(linked, tmp_path: Path) -> None:
    """Chakra's own converter, run on the same host ET, writes the same ``inputs.values``."""
    from chakra.src.converter.pytorch_converter import PyTorchConverter

    host_json = tmp_path / "host.json"
    host_json.write_bytes(gzip.open(RUN / "rank-0.host_et.json.gz").read())
    chakra_et = tmp_path / "chakra.0.et"
    PyTorchConverter().convert(str(host_json), str(chakra_et), False)
    _, ours = linked
    assert _pg_node_values(ours).encode() == _pg_node_values(chakra_et).encode()


def test_host_et_only_conversion_too(tmp_path: Path) -> None:
    trace, _ = convert_pair(RUN / "rank-1.host_et.json.gz", None)
    write_et(trace, tmp_path / "rank-1.et")
    values = _pg_node_values(tmp_path / "rank-1.et")
    assert _astra_sim_parse(values) == json.loads(_pytorch_pg_text(1))
    assert trace.meta.process_groups == GROUPS


def test_round_trip_keeps_the_value_and_the_groups(linked) -> None:
    trace, path = linked
    back = read_et(path, cache=False)
    pick = pl.col("name") == PG_INIT
    assert back.nodes.filter(pick)["inputs"].to_list() == trace.nodes.filter(pick)["inputs"].to_list()
    assert back.meta.process_groups == trace.meta.process_groups == GROUPS
    (values,) = back.nodes.filter(pick)["inputs"].struct.field("values").to_list()
    assert pg_init_groups(values) == json.loads(_pytorch_pg_text())


def test_old_double_escaped_ets_still_read(linked, tmp_path: Path) -> None:
    """An ET written before the fix (values as a JSON list of the escaped text) reads as before:
    its process groups come from the ET header, its node value is kept verbatim and still parses."""
    trace, _ = linked
    old = orjson.dumps([_pytorch_pg_text()]).decode()  # what the earlier writer stored
    assert old.startswith('["[{\\"pg_name\\"')
    with pytest.raises(json.JSONDecodeError):
        _astra_sim_parse(old)  # the bug: ASTRA-sim could not parse it
    nodes = trace.nodes.with_columns(
        pl.when(pl.col("name") == PG_INIT)
        .then(pl.col("inputs").struct.with_fields(pl.lit(old).alias("values")))
        .otherwise(pl.col("inputs"))
        .alias("inputs")
    )
    old_trace = type(trace)(nodes=nodes, deps=trace.deps, meta=trace.meta, telemetry=trace.telemetry)
    write_et(old_trace, tmp_path / "rank-0.et")
    back = read_et(tmp_path / "rank-0.et", cache=False)
    assert back.meta.process_groups == GROUPS
    (values,) = back.nodes.filter(pl.col("name") == PG_INIT)["inputs"].struct.field("values").to_list()
    assert values == old
    assert pg_init_groups(values) == json.loads(_pytorch_pg_text())


def test_pg_init_groups_reads_both_forms_and_refuses_the_rest() -> None:
    text = '[{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 2}]'
    want = json.loads(text)
    assert pg_init_groups(pg_init_values(text)) == want
    assert pg_init_groups(str([text])) == want  # Chakra's str(values)
    assert pg_init_groups(orjson.dumps([text]).decode()) == want  # earlier charllm-trace
    for bad in (None, "", "[]", "['']", "['not json']", '["a", "b"]', "[1]", "{}", "['{\"a\": 1}']"):
        assert pg_init_groups(bad) is None, bad
