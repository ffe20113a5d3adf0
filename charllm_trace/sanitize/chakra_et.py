"""Chakra ET files (length-delimited protobuf) in :mod:`charllm_trace.sanitize`.

The GlobalMetadata's attributes teach host and user names (:func:`collect`); :func:`clean`
rewrites every message: node names, input/output strings, string attributes (JSON strings
cleaned as JSON trees) and drops private attributes (stacks). Messages are framed by
:mod:`charllm_trace.et.framing`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson

from charllm_trace.core.errors import InputError
from charllm_trace.et.conventions import PREFIX
from charllm_trace.et.framing import frame, iter_messages
from charllm_trace.sanitize.rules import (
    DROP_KEYS,
    HOST_KEYS,
    ID_KEYS,
    USER_KEYS,
    USER_TOKEN,
    Scrubber,
    collect_json,
)


def _clean_attr_list(sc: Scrubber, attrs: Any, collect_only: bool = False) -> None:
    keep = []
    for a in attrs:
        # our converter's attributes are named charllm.<key> (charllm.hostname, charllm.pid)
        nl = a.name.lower().removeprefix(PREFIX).removeprefix("json.")
        which = a.WhichOneof("value")
        if collect_only:
            if which == "string_val":
                _collect_string(sc, nl, a.string_val)
            continue
        if nl in DROP_KEYS:
            sc.report.keys_dropped += 1
            continue
        _clean_attr(sc, a, nl, which)
        keep.append(a)
    if not collect_only and len(keep) != len(attrs):
        kept = [type(a)() for a in keep]
        for dst, src in zip(kept, keep, strict=True):
            dst.CopyFrom(src)
        del attrs[:]
        attrs.extend(kept)


def _collect_string(sc: Scrubber, nl: str, s: str) -> None:
    """Learn the host and user names of one string attribute (``nl``: its lower-case key)."""
    if nl in HOST_KEYS and nl != "node":
        sc.add_host(s)
    elif nl in USER_KEYS:
        sc.add_user(s)
    elif s[:1] in "{[":
        try:
            collect_json(sc, orjson.loads(s))
        except orjson.JSONDecodeError:
            pass


def _clean_attr(sc: Scrubber, a: Any, nl: str, which: str | None) -> None:
    """Clean one attribute kept in place (``which``: its value field)."""
    if which == "string_val":
        s = a.string_val
        if nl in HOST_KEYS:
            a.string_val = sc.host_value(s)
        elif nl in USER_KEYS:
            a.string_val = USER_TOKEN
        elif s[:1] in "{[":
            try:
                a.string_val = orjson.dumps(sc.clean(orjson.loads(s))).decode()
            except orjson.JSONDecodeError:
                a.string_val = sc.text(s)
        else:
            a.string_val = sc.text(s)
    elif nl in ID_KEYS and which in ("int64_val", "uint64_val", "int32_val", "uint32_val"):
        v = getattr(a, which)
        sc.add_id(v)  # learnt here too: a new id makes sanitize_run write every file again
        setattr(a, which, sc.id_of(v))
    elif which == "string_list":
        vals = [sc.text(v) for v in a.string_list.values]
        del a.string_list.values[:]
        a.string_list.values.extend(vals)


def collect(sc: Scrubber, path: Path, data: bytes) -> None:
    """Learn host and user names from the GlobalMetadata's attributes."""
    from charllm_trace.et.schema import GlobalMetadata

    first = next(iter_messages(data, path), None)
    if first is not None:
        gm = GlobalMetadata()
        try:
            gm.ParseFromString(first)
        except Exception as exc:  # protobuf's DecodeError: not our header
            raise InputError(path, "not a Chakra ET: the first message is not a GlobalMetadata") from exc
        _clean_attr_list(sc, gm.attr, collect_only=True)


def clean(sc: Scrubber, path: Path, data: bytes) -> bytes:
    """The cleaned ET: every message parsed, scrubbed and framed again."""
    from charllm_trace.et.schema import GlobalMetadata, Node

    out = io.BytesIO()
    i = -1
    for i, raw in enumerate(iter_messages(data, path)):
        msg = GlobalMetadata() if i == 0 else Node()
        try:
            msg.ParseFromString(raw)
        except Exception as exc:
            raise InputError(path, f"not a Chakra ET (message {i} does not parse)") from exc
        if i > 0:
            msg.name = sc.text(msg.name)
            for io_ in (msg.inputs, msg.outputs):
                io_.values = sc.text(io_.values)
                io_.shapes = sc.text(io_.shapes)
                io_.types = sc.text(io_.types)
        _clean_attr_list(sc, msg.attr)
        body = msg.SerializeToString()
        out.write(frame(body))
    if i < 0:
        raise InputError(path, "empty: not a Chakra ET (no GlobalMetadata message)")
    return out.getvalue()
