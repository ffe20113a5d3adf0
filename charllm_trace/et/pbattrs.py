"""The protobuf encoding of a node's free-form attributes: the ``attrs`` JSON object (one
``AttributeProto`` per key) and the all-to-all split lists.

Shared by the writer's protobuf path (``writer.iter_node_messages``) and the C encoder's Python
side (``encode.py``), which serializes these with protobuf once per distinct value and hands the
bytes to the C code.
"""

from __future__ import annotations

from typing import Any

import orjson

from charllm_trace.et import conventions as cv

_MASK64 = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def add_value(attrs: Any, name: str, value: Any) -> None:
    """Append ``value`` (a JSON value) as an AttributeProto called ``name``."""
    if isinstance(value, bool):
        attrs.add(name=name, bool_val=value)
    elif isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
        attrs.add(name=name, int64_val=value)
    elif isinstance(value, int) and 0 <= value <= _MASK64:
        attrs.add(name=name, uint64_val=value)
    elif isinstance(value, float):
        attrs.add(name=name, double_val=value)
    elif isinstance(value, str):
        attrs.add(name=name, string_val=value)
    elif isinstance(value, list) and value and _list_kind(value) is not None:
        kind = _list_kind(value)
        a = attrs.add(name=name)
        getattr(a, kind).values.extend(value)
    else:  # null, object, empty or mixed list, huge int: JSON text
        attrs.add(name=cv.A_JSON + name.removeprefix(cv.A_ESCAPED), string_val=orjson.dumps(value).decode())


def _list_kind(values: list[Any]) -> str | None:
    if all(isinstance(v, bool) for v in values):
        return "bool_list"
    if all(isinstance(v, int) and not isinstance(v, bool) and _INT64_MIN <= v <= _INT64_MAX for v in values):
        return "int64_list"
    if all(isinstance(v, float) for v in values):
        return "double_list"
    if all(isinstance(v, str) for v in values):
        return "string_list"
    return None


def extra_items(text: str) -> tuple[list[tuple[str, Any]], bool]:
    """The ``attrs`` JSON object as (attribute name, value) pairs, one per key (a reserved key
    escaped), and whether the exact text must be kept too (not a JSON object, an empty one, or
    not in orjson's compact form)."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return [], True
    if not isinstance(obj, dict) or not obj:
        return [], True
    items = [(cv.A_ESCAPED + key if cv.is_reserved(key) else key, value) for key, value in obj.items()]
    return items, orjson.dumps(obj).decode() != text


def add_extra_attrs(node: Any, text: str) -> None:
    """The ``attrs`` JSON object, one attribute per key; the exact text too when needed."""
    items, raw = extra_items(text)
    for name, value in items:
        add_value(node.attr, name, value)
    if raw:
        add_raw_attrs(node, text)


def add_raw_attrs(node: Any, text: str) -> None:
    """The exact ``attrs`` text, as an attribute of its own."""
    node.attr.add(name=cv.A_ATTRS_RAW, string_val=text)


def add_splits(add: Any, in_split: Any, out_split: Any) -> None:
    """The all-to-all split lists (JSON text where one holds a null)."""
    for v, aname in ((in_split, cv.A_IN_SPLIT), (out_split, cv.A_OUT_SPLIT)):
        if v is None:
            continue
        if None in v:
            add(name=aname + ".json", string_val=orjson.dumps(v).decode())
        else:
            attr = add(name=aname)
            attr.int64_list.SetInParent()
            attr.int64_list.values.extend(v)
