"""The ``inputs`` / ``outputs`` attributes of the ASTRA-sim flavour: what ASTRA-sim's local
memory model reads (docs/et-conventions.md, *The ASTRA-sim flavour*).

ASTRA-sim, when a system configuration sets ``track-local-mem: 1``, reads on every node it
finishes an attribute ``inputs`` and one ``outputs``, each a ``string_list`` of pairs (tensor
name, size in bytes as a decimal string), and stops when either is missing. A tensor name is
written once (a second write of the same name is an assertion there).

- **From the host ET** (a rank linked to its host execution trace, or converted from one): the
  tensors a node records, ``Tensor(...)`` entries of its ``inputs`` / ``outputs`` values
  ``[tensor id, storage id, offset, elements, element bytes, device]``, named
  ``t<tensor id>@<device>`` with size elements × element bytes. A tensor written again (an
  in-place op) gets a new version, ``t<id>@<device>#<k>``, and later readers read that one. A
  tensor read before the trace writes it (a parameter, a batch) is read as version 1, the bare
  name, and its first write is ``#2``: ASTRA-sim books a read of a name never written as that
  name's write at time 0 (and asserts on a later write of it);
- **reduced form** otherwise (a node without recorded tensors: Kineto-only nodes, GPU kernels,
  collectives without a host op's record): both lists present and empty, which ASTRA-sim
  accepts and tracks as no memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl

from charllm_trace.et.conventions import tensor_entries

#: fields of a tensor value in a host ET: id, storage id, offset, elements, element bytes, device
TENSOR_FIELDS = 6


def tensors(io: dict[str, Any] | None) -> list[tuple[str, int]]:
    """(``t<id>@<device>``, bytes) of the ``Tensor(...)`` entries of a recorded ``inputs`` or
    ``outputs`` (values/types JSON strings); [] when there are none or they do not parse."""
    return [
        (f"t{v[0]}@{v[5]}", max(v[3], 0) * max(v[4], 0))
        for v, t in tensor_entries(io, "values")
        if t.startswith("Tensor(")
        and isinstance(v, list)
        and len(v) == TENSOR_FIELDS
        and all(type(x) is int for x in v[:5])
    ]


def io_lists(nodes: pl.DataFrame) -> Iterator[tuple[list[str], list[str]]]:
    """For each node of a rank's plan (in its order), the ``inputs`` and ``outputs`` string lists."""
    has = "inputs" in nodes.columns and "outputs" in nodes.columns
    rows = (
        nodes.select("inputs", "outputs").iter_rows() if has else ((None, None) for _ in range(nodes.height))
    )
    version: dict[str, int] = {}  # tensor -> its current version (1: as it came, or first written)
    for ins, outs in rows:
        read = []
        for name, size in tensors(ins):
            k = version.setdefault(name, 1)  # read before any write: the value it had, version 1
            read += [name if k == 1 else f"{name}#{k}", str(size)]
        written = []
        for name, size in tensors(outs):
            k = version.get(name, 0) + 1
            version[name] = k
            written += [name if k == 1 else f"{name}#{k}", str(size)]
        yield read, written
