"""What a scan of Chakra ET Node messages finds (:class:`NodeScan`), and :class:`Corrupt`, which
every decoder raises for bytes that are not a valid message. Shared by the C scanner's driver
(``et/nodescan.py``) and the numpy oracle (``et/oracle.py``); imports nothing of the package."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD = 32  # zero bytes after the data: varint reads past a message end stop there


class Corrupt(Exception):
    """Bytes that are not a valid protobuf message; ``where`` is a message index."""

    def __init__(self, where: int, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"message {where}: {problem}")


def as_int64(u: np.ndarray) -> np.ndarray:
    return u.view(np.int64)


@dataclass
class NodeScan:
    """Where everything of every node is (offsets into the buffer) and its varint values."""

    id: np.ndarray  # uint64
    type: np.ndarray  # uint64
    start_us: np.ndarray  # uint64
    dur_us: np.ndarray  # uint64
    name_off: np.ndarray | None  # (numpy decoder; None from the C scanner, which gives views)
    name_len: np.ndarray | None
    io_present: np.ndarray  # (n, 2) bool: inputs, outputs
    io_off: np.ndarray | None  # (n, 6): inputs values/shapes/types, outputs values/shapes/types
    io_len: np.ndarray | None  # (n, 6)
    dep_node: np.ndarray  # int64 node id
    dep_val: np.ndarray  # int64
    dep_kind: np.ndarray  # uint8: 0 ctrl, 1 data
    attr_node: np.ndarray  # node index (int32 from the C scanner)
    attr_code: np.ndarray  # index into names
    names: list[str]
    vfield: np.ndarray
    vwt: np.ndarray
    vval: np.ndarray  # uint64
    voff: np.ndarray
    # from the C scanner: value kind (K_*) and integer value of every attribute
    kind: np.ndarray | None = None
    ival: np.ndarray | None = None
    # from the C scanner: binary views of the 7 text fields (name, inputs values/shapes/types,
    # outputs values/shapes/types), and which fields hold text that is not UTF-8 (TEXT_FIELDS bits)
    views: list[np.ndarray] | None = None
    bad_text: int = 0
    end: int = -1  # where the scanned messages end (the next part's first message)


#: the text fields in the order they are checked (and reported); bit k of NodeScan.bad_text
TEXT_FIELDS = (
    "a node name",
    "inputs.values",
    "inputs.shapes",
    "inputs.types",
    "outputs.values",
    "outputs.shapes",
    "outputs.types",
    "an attribute value",
)
