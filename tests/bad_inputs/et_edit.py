"""Edits of a Chakra ET file's messages (for bad inputs): its GlobalMetadata, its last node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from charllm_trace.et import schema as pb
from charllm_trace.et.framing import frame, iter_messages


def _messages(p: Path) -> list[bytes]:
    return [bytes(m) for m in iter_messages(p.read_bytes(), p)]


def _write(p: Path, msgs: list[bytes]) -> Path:
    p.write_bytes(b"".join(frame(m) for m in msgs))
    return p


def with_global_version(p: Path, version: str) -> Path:
    msgs = _messages(p)
    gm = pb.GlobalMetadata()
    gm.ParseFromString(msgs[0])
    gm.version = version
    msgs[0] = gm.SerializeToString()
    return _write(p, msgs)


def with_global_attr(p: Path, name: str, value: Any) -> Path:
    """Set (or add) attribute ``name`` of the GlobalMetadata: an int64 or a string value."""
    msgs = _messages(p)
    gm = pb.GlobalMetadata()
    gm.ParseFromString(msgs[0])
    attr = next((a for a in gm.attr if a.name == name), None)
    if attr is None:
        attr = gm.attr.add(name=name)
    if isinstance(value, int):
        attr.int64_val = value
    else:
        attr.string_val = str(value)
    msgs[0] = gm.SerializeToString()
    return _write(p, msgs)


def drop_last_message(p: Path) -> Path:
    """The file cut exactly at a message boundary: its last node is gone."""
    return _write(p, _messages(p)[:-1])


def _set_count(msgs: list[bytes]) -> list[bytes]:
    """The header's node count made to match (so the reader gets to the nodes themselves)."""
    gm = pb.GlobalMetadata()
    gm.ParseFromString(msgs[0])
    for a in gm.attr:
        if a.name == "charllm.node_count":
            a.int64_val = len(msgs) - 1
    msgs[0] = gm.SerializeToString()
    return msgs


def repeat_first_node(p: Path) -> Path:
    """A second node with the first node's id."""
    msgs = _messages(p)
    return _write(p, _set_count([*msgs, msgs[1]]))


def every_node_twice(p: Path) -> Path:
    msgs = _messages(p)
    return _write(p, _set_count([msgs[0], *msgs[1:], *msgs[1:]]))
