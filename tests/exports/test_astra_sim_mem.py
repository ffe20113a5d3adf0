"""The ASTRA-sim flavour carries the ``inputs`` / ``outputs`` string lists that ASTRA-sim's local
memory model (``track-local-mem: 1``) reads on every node (issue 27 item 8): tensors of the host
ET where the rank has them, empty lists otherwise; each tensor name written once. Decoded with
Chakra's own protobuf, independently of our writer."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from chakra.schema.protobuf import et_def_pb2 as pb

from charllm_trace.exports.astra_sim import export_astra_sim
from charllm_trace.exports.astra_sim_mem import io_lists, tensors
from tests.exports.test_export_astra_sim import decode


def _io(values: str, types: str) -> dict[str, str]:
    return {"values": values, "shapes": "[]", "types": types}


def test_in_place_writes_get_new_versions_and_readers_follow() -> None:
    f = '["Tensor(float)"]'
    nodes = pl.DataFrame(
        {
            "inputs": [_io("[]", "[]"), _io('[[7,1,0,10,4,"cpu"]]', f), _io('[[7,1,0,10,4,"cpu"]]', f)],
            "outputs": [_io('[[7,1,0,10,4,"cpu"]]', f), _io('[[7,1,0,10,4,"cpu"]]', f), _io("[]", "[]")],
        }
    )
    got = list(io_lists(nodes))
    # empty -> t7 written; in-place op reads t7, writes t7#2; the last reads t7#2
    assert got == [([], ["t7@cpu", "40"]), (["t7@cpu", "40"], ["t7@cpu#2", "40"]), (["t7@cpu#2", "40"], [])]
    # a tensor read before its first write (a parameter the optimizer updates in place): ASTRA-sim
    # books the read as the name's write, so the write must take a new name
    nodes = pl.DataFrame({"inputs": [_io('[[7,1,0,10,4,"cpu"]]', f), _io("[]", "[]")],
                          "outputs": [_io("[]", "[]"), _io('[[7,1,0,10,4,"cpu"]]', f)]})  # fmt: skip
    assert list(io_lists(nodes)) == [(["t7@cpu", "40"], []), ([], ["t7@cpu#2", "40"])]
    assert tensors(_io('[[1,2],5,"cpu"]', '["GenericList[Int]","Int","Device"]')) == []


def _lists(n: pb.Node) -> tuple[list[str], list[str]]:
    a = {x.name: x for x in n.attr}
    assert "inputs" in a and "outputs" in a, n.name  # ASTRA-sim stops on a node without them
    return list(a["inputs"].string_list.values), list(a["outputs"].string_list.values)


def test_exported_cpu_run_carries_its_host_et_tensors(gloo_ets: Path, tmp_path: Path) -> None:
    import charllm_trace as ct

    exp = export_astra_sim(ct.load(gloo_ets), tmp_path)
    for f in exp.files:
        _, nodes = decode(f)
        written: set[str] = set()  # names written, or read first (ASTRA-sim then books a write at 0)
        n_with = 0
        for n in nodes:
            ins, outs = _lists(n)
            assert len(ins) % 2 == 0 and len(outs) % 2 == 0
            assert all(s.isdigit() for s in ins[1::2] + outs[1::2])
            written |= set(ins[0::2])
            assert not written & set(outs[0::2]), n.name  # each tensor name written once
            written |= set(outs[0::2])
            n_with += bool(ins or outs)
        assert n_with > len(nodes) // 2  # most host ops record their tensors
