"""Parse a PyTorch host execution trace (``ExecutionTraceObserver`` JSON).

Two layouts exist:

- schema 1.0.x: flat keys per node (``parent``, ``rf_id``, ``tid``, ``inputs`` (values),
  ``input_shapes``, ``input_types``, ``outputs`` ...);
- schema 1.1.x (``1.1.0-chakra.0.0.4``, ``1.1.1-chakra.0.0.4``): ``ctrl_deps`` for the parent,
  ``inputs``/``outputs`` as ``{values, shapes, types, strides}`` and the rest in an ``attrs`` list.

Both become one table (:class:`HostET`). Host ETs carry no timestamps; times come from the
Kineto profile they are linked with.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import polars as pl

from charllm_trace.converters._io import is_host_et, is_kineto, load_json
from charllm_trace.converters.host_et_checks import check_fields, check_parent_cycle, node_objects
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import DEP_SCHEMA, ProcessGroup, Trace, TraceMeta

PG_INIT = "## process_group:init ##"
#: RecordScope.USER_SCOPE: record_function ranges (ProfilerStep#N, ## forward ## ...)
USER_SCOPE = 7


def pg_init_values(raw: str) -> str:
    """``inputs.values`` of the ``## process_group:init ##`` node: PyTorch's process-group JSON text
    ``raw``, byte for byte, inside ``['`` and ``']``.

    This is what Chakra's converter writes (``str(inputs["values"])`` of the one-string list) for
    every description PyTorch writes (``json.dumps``: ASCII, no ``'``, no backslash), and what
    ASTRA-sim reads: it drops two characters at each end (``substr(2, size - 4)``) and parses the
    rest as JSON. Writing the values list as JSON instead (``["[{\"pg_name\": ...}]"]``) escapes the
    description a second time and ASTRA-sim cannot parse it."""
    return "['" + raw + "']"


def pg_init_groups(values: str | None) -> list[dict[str, Any]] | None:
    """The process groups in a ``## process_group:init ##`` node's ``inputs.values``, or None.

    Reads both forms: ``['<json>']`` (Chakra's converter, and ours since the fix) and the JSON list
    ``["<escaped json>"]`` that earlier charllm-trace versions wrote."""
    if not values or len(values) < 4:
        return None
    if values.startswith("['") and values.endswith("']"):
        text: str = values[2:-2]  # ASTRA-sim's substr(2, size - 4)
    else:
        try:
            v = orjson.loads(values)
        except orjson.JSONDecodeError:
            return None
        if not (isinstance(v, list) and len(v) == 1 and isinstance(v[0], str)):
            return None
        text = v[0]
    try:
        groups = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(groups, list):
        return None
    return [g for g in groups if isinstance(g, dict)]


@dataclass
class HostET:
    path: str
    schema: str | None
    pid: int | None
    nodes: pl.DataFrame  # id, name, parent, rf_id, et_tid, scope, kind, inputs, outputs, attrs
    io: dict[int, tuple[Any, Any, Any]]  # id -> (input shapes, input types, input values)
    tensors_in: pl.DataFrame  # node, tensor (tensor id, storage id as "t:s")
    tensors_out: pl.DataFrame
    process_groups: list[dict[str, Any]] = field(default_factory=list)
    time: str | None = None


def _tensor_keys(values: Any, out: list[str]) -> None:
    """Keys ("<tensor id>:<storage id>") of the tensors in a host-ET value list, nested lists included.

    A tensor is written as ``[tensor_id, storage_id, offset, numel, itemsize, device]``."""
    if type(values) is not list:
        return
    stack = [values]  # lists only
    while stack:
        v = stack.pop()
        if len(v) == 6 and type(v[0]) is int and type(v[1]) is int and type(v[5]) is str:
            out.append(f"{v[0]}:{v[1]}")
        else:
            stack += [x for x in v if type(x) is list]


#: host-ET schemas read here: PyTorch's 1.0.x and the 1.1.x ones (``1.1.1-chakra.0.0.4``)
SUPPORTED_SCHEMA = re.compile(r"1\.[01]\.\d+(?:-[\w.]+)?")


def _check_ids(path: str | os.PathLike[str], raw: list[dict[str, Any]]) -> pl.Series:
    """The node ids as an Int64 series, after checking they are unique 64-bit integers, before any
    join on them (a file whose ids are all equal made the converter's joins grow without bound)."""
    ids = [n["id"] for n in raw]
    if ids and not (min(ids) >= 0 and max(ids) < 2**63):
        bad = next(i for i in ids if not 0 <= i < 2**63)
        raise InputError(path, f"host ET node id {bad} is not a 64-bit id >= 0")
    s = pl.Series(ids, dtype=pl.Int64)
    if s.n_unique() == s.len():
        return s
    dup = s.value_counts(sort=True).filter(pl.col("count") > 1)
    first, n = dup.row(0)
    raise InputError(
        path,
        f"host ET node id {first} appears {n:,} times ({dup.height:,} ids repeated): node ids must be unique",
    )


def parse_host_et(doc: dict[str, Any], path: str | os.PathLike[str]) -> HostET:
    """The host ET document ``doc`` (read from ``path``) as a :class:`HostET`; ``InputError`` for
    anything malformed, odd values included (a node's fields of the wrong type or out of range)."""
    try:
        return _parse_host_et(doc, path)
    except (TypeError, KeyError, AttributeError, ValueError, OverflowError, IndexError) as exc:
        # the parser takes the document's shapes as PyTorch writes them: anything else here is
        # a malformed file (the fuzz job in tests/bad_inputs/fuzz.py finds such values)
        raise InputError(
            path, f"malformed host ET ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
        ) from None


def _schema(doc: dict[str, Any], path: str | os.PathLike[str]) -> str | None:
    """The document's schema version, after checking it is a host ET of a version read here."""
    if not is_host_et(doc):
        if is_kineto(doc):
            raise InputError(path, "is a Kineto profile, not a host execution trace")
        raise InputError(path, "not a PyTorch host execution trace (no nodes list)")
    schema = doc.get("schema") if isinstance(doc.get("schema"), str) else None
    if doc.get("schema") is not None and (schema is None or not SUPPORTED_SCHEMA.match(schema)):
        raise InputError(
            path,
            f"host ET schema {doc.get('schema')!r} is not supported (charllm-trace reads 1.0.x and 1.1.x)",
        )
    return schema


#: what ``inputs`` and ``outputs`` may be (besides absent): an object (1.1.x) or a list (1.0.x)
_IO_TYPES = (dict, list)


def _node_fields(n: dict[str, Any]) -> tuple[Any, ...]:
    """(input values, shapes, types, output values, shapes, types, parent, rf_id, tid, scope,
    extra attributes, plain) of a node in either schema.

    ``plain``: the node's inputs and outputs are of the kinds allowed and its parent, rf_id, tid and
    scope are the values :func:`check_fields` checks (no repeated attribute, no ``ctrl_deps`` beside
    1.0.x fields), so checking the returned values checks the node."""
    inputs = n.get("inputs")
    if isinstance(inputs, dict):  # 1.1.x
        attrs = n.get("attrs")
        am: dict[Any, Any] = {}
        plain = True
        if isinstance(attrs, list):
            am = {a.get("name"): a.get("value") for a in attrs if isinstance(a, dict)}
            plain = len(am) == len(attrs)
        o = n.get("outputs")
        plain = plain and (o is None or isinstance(o, _IO_TYPES))
        o = o or {}
        rf, tid = am.pop("rf_id", None), am.pop("tid", None)
        return (
            inputs.get("values", []),
            inputs.get("shapes", []),
            inputs.get("types", []),
            o.get("values", []),
            o.get("shapes", []),
            o.get("types", []),
            n.get("ctrl_deps"),
            rf,
            tid,
            am.get("scope"),
            am,
            plain,
        )
    o = n.get("outputs", [])
    plain = (
        (inputs is None or isinstance(inputs, _IO_TYPES))
        and (o is None or isinstance(o, _IO_TYPES))
        and "ctrl_deps" not in n
    )
    extra = {k: n[k] for k in ("fw_parent", "seq_id", "scope", "fw_tid", "op_schema") if k in n}
    return (
        n.get("inputs", []),
        n.get("input_shapes", []),
        n.get("input_types", []),
        o,
        n.get("output_shapes", []),
        n.get("output_types", []),
        n.get("parent"),
        n.get("rf_id"),
        n.get("tid"),
        n.get("scope"),
        extra,
        plain,
    )


def _int_column(values: list[Any], checked: bool) -> pl.Series:
    """``values`` as an Int64 column; with ``checked`` False, values that are not integers become
    null (after :func:`check_fields`, only values it did not look at can be such)."""
    if not checked:
        values = [v if isinstance(v, int) else None for v in values]
    return pl.Series(values, dtype=pl.Int64)


def _int64_or_none(values: list[Any]) -> bool:
    """Every value is None or an int (not a bool) that fits in 64 bits."""
    if not set(map(type, values)) <= {int, type(None)}:
        return False
    try:
        pl.Series(values, dtype=pl.Int64)
    except (TypeError, OverflowError):
        return False
    return True


def _process_groups(iv: Any) -> list[dict[str, Any]]:
    """The process groups in a ``PG_INIT`` node's first input (JSON text)."""
    if not (iv and isinstance(iv[0], str)):
        return []
    try:
        v = orjson.loads(iv[0])
    except orjson.JSONDecodeError:
        v = None
    return [p for p in v if isinstance(p, dict)] if isinstance(v, list) else []


def _parse_host_et(doc: dict[str, Any], path: str | os.PathLike[str]) -> HostET:
    schema = _schema(doc, path)
    raw = node_objects(path, doc["nodes"])
    ids = _check_ids(path, raw)
    try:
        cols = _columns(raw)
    except (TypeError, KeyError, AttributeError, ValueError, OverflowError, IndexError):
        check_fields(path, raw)  # a node's field of the wrong kind is named before the failure
        raise
    # The checks of check_fields, on whole columns; it runs node by node (to name the first bad
    # node) only when these cannot vouch for every node.
    fields = ("parent", "rf_id", "tid", "scope")
    checked = cols["plain"] and all(_int64_or_none(cols[k]) for k in fields)
    if not checked:
        check_fields(path, raw)
    parent, rf_id, tid, scope = (_int_column(cols[k], checked) for k in fields)
    io_struct = pl.Struct({"values": pl.String, "shapes": pl.String, "types": pl.String})
    in_values = pl.Series(cols["in_values"], dtype=pl.String)
    for i, text in cols["pg_values"]:
        in_values = in_values.scatter(i, text)
    io_cols = pl.DataFrame(
        {
            "in_v": in_values,
            **{
                k: pl.Series(cols[k], dtype=pl.String)
                for k in ("in_shapes", "in_types", "out_v", "out_shapes", "out_types")
            },
        }
    ).select(
        pl.struct(values="in_v", shapes="in_shapes", types="in_types").cast(io_struct).alias("inputs"),
        pl.struct(values="out_v", shapes="out_shapes", types="out_types").cast(io_struct).alias("outputs"),
    )
    nodes = pl.DataFrame(
        {
            "id": ids,
            "name": pl.Series(cols["names"], dtype=pl.String),
            "parent": parent,
            "rf_id": rf_id,
            "et_tid": tid,
            "scope": scope,
            "inputs": io_cols["inputs"],
            "outputs": io_cols["outputs"],
            "attrs": pl.Series(cols["attrs"], dtype=pl.String),
        }
    )
    # A parent that is the node itself, or not a node of this trace (the implicit root), is no parent.
    nodes = nodes.with_columns(
        pl.when(pl.col("parent").is_in(nodes["id"].implode()) & (pl.col("parent") != pl.col("id")))
        .then(pl.col("parent"))
        .alias("parent"),
        pl.when(pl.col("scope") == USER_SCOPE)
        .then(pl.lit("annotation"))
        .otherwise(pl.lit("cpu_op"))
        .alias("kind"),
    )
    check_parent_cycle(path, nodes)
    pid = doc.get("pid") if isinstance(doc.get("pid"), int) else None
    id_arr = ids.to_numpy()
    return HostET(
        path=os.fspath(path),
        schema=schema,
        pid=pid,
        nodes=nodes,
        io=cols["io"],
        tensors_in=_tensor_table(id_arr, cols["in_counts"], cols["in_keys"]),
        tensors_out=_tensor_table(id_arr, cols["out_counts"], cols["out_keys"]),
        process_groups=cols["pgs"],
        time=doc.get("time") if isinstance(doc.get("time"), str) else None,
    )


def _tensor_table(ids: np.ndarray, counts: list[int], keys: list[str]) -> pl.DataFrame:
    """(node, tensor) rows: node ``ids[i]`` once per each of its ``counts[i]`` keys."""
    return pl.DataFrame(
        {
            "node": pl.Series(np.repeat(ids, counts), dtype=pl.Int64),
            "tensor": pl.Series(keys, dtype=pl.String),
        }
    )


def _columns(raw: list[dict[str, Any]]) -> dict[str, Any]:
    """One pass over the nodes: each field as a list (values, shapes and types as JSON text), the
    tensor keys, the io map, the process groups and whether every node is ``plain``."""
    names, parents, rf_ids, tids, scopes, attrs_j = [], [], [], [], [], []
    in_v, in_s, in_t, out_v, out_s, out_t = [], [], [], [], [], []
    in_keys: list[str] = []
    out_keys: list[str] = []
    in_counts, out_counts = [], []
    io: dict[int, tuple[Any, Any, Any]] = {}
    pgs: list[dict[str, Any]] = []
    pg_values: list[tuple[int, str]] = []
    plain = True
    dumps = orjson.dumps
    for i, n in enumerate(raw):
        iv, ish, ity, ov, osh, oty, parent, rf, tid, scope, extra, ok = _node_fields(n)
        plain = plain and ok
        name = n.get("name", "")
        name = name if type(name) is str else str(name)
        names.append(name)
        parents.append(parent)
        rf_ids.append(rf)
        tids.append(tid)
        scopes.append(scope)
        # The process-group node keeps PyTorch's JSON text as it is (see pg_init_values); every
        # other node's values list is written as JSON.
        if name == PG_INIT and isinstance(iv, list) and len(iv) == 1 and isinstance(iv[0], str):
            pg_values.append((i, pg_init_values(iv[0])))
            in_v.append("")
        else:
            in_v.append(dumps(iv).decode())
        in_s.append(dumps(ish).decode())
        in_t.append(dumps(ity).decode())
        out_v.append(dumps(ov).decode())
        out_s.append(dumps(osh).decode())
        out_t.append(dumps(oty).decode())
        attrs_j.append(dumps(extra).decode() if extra else None)
        io[n["id"]] = (ish, ity, iv)
        k = len(in_keys)
        _tensor_keys(iv, in_keys)
        in_counts.append(len(in_keys) - k)
        k = len(out_keys)
        _tensor_keys(ov, out_keys)
        out_counts.append(len(out_keys) - k)
        if name == PG_INIT:
            pgs.extend(_process_groups(iv))
    return {
        "names": names,
        "parent": parents,
        "rf_id": rf_ids,
        "tid": tids,
        "scope": scopes,
        "attrs": attrs_j,
        "in_values": in_v,
        "in_shapes": in_s,
        "in_types": in_t,
        "out_v": out_v,
        "out_shapes": out_s,
        "out_types": out_t,
        "in_keys": in_keys,
        "out_keys": out_keys,
        "in_counts": in_counts,
        "out_counts": out_counts,
        "io": io,
        "pgs": pgs,
        "pg_values": pg_values,
        "plain": plain,
    }


def read_host_et(path: str | os.PathLike[str]) -> HostET:
    return parse_host_et(load_json(path), path)


def data_deps(host: HostET) -> pl.DataFrame:
    """Data edges: a node depends on the latest earlier node (host ET ids are in execution order)
    that output a tensor it reads (same tensor id and storage id)."""
    if host.tensors_in.height == 0 or host.tensors_out.height == 0:
        return pl.DataFrame(schema=DEP_SCHEMA)
    cons = host.tensors_in.unique().sort("node")
    prod = host.tensors_out.unique().rename({"node": "producer"}).sort("producer")
    with warnings.catch_warnings():  # both sides are sorted by node id; polars cannot check it per group
        warnings.simplefilter("ignore", UserWarning)
        j = cons.join_asof(
            prod,
            left_on="node",
            right_on="producer",
            by="tensor",
            strategy="backward",
            allow_exact_matches=False,
        )
    return (
        j.filter(pl.col("producer").is_not_null())
        .select(pl.col("node"), pl.col("producer").alias("dep"), pl.lit("data").alias("kind"))
        .unique()
        .sort("node", "dep")
        .cast(DEP_SCHEMA)  # type: ignore[arg-type]
    )


def pg_groups(pgs: list[dict[str, Any]]) -> tuple[ProcessGroup, ...]:
    out = {}
    for p in pgs:
        name = p.get("pg_name")
        if name is None:
            continue
        ranks = p.get("ranks") if isinstance(p.get("ranks"), list) else []
        size = p.get("group_size")
        if not ranks and isinstance(size, int) and p.get("pg_desc") == "default_pg":
            ranks = list(range(size))  # torch writes [] for the default group: all ranks
        out[str(name)] = ProcessGroup(
            name=str(name), desc=p.get("pg_desc"), ranks=tuple(int(r) for r in ranks)
        )
    return tuple(out[k] for k in sorted(out))


def host_et_trace(host: HostET) -> tuple[Trace, dict[str, Any]]:
    """A host ET alone: the op tree and data dependencies, without times (``has_timestamps`` False).

    Collectives: with no GPU kernels to carry them, the ``gloo:`` / ``nccl:`` / ``hccl:`` ops become the
    communication nodes (type and size from their inputs).
    """
    from charllm_trace.converters import collectives as C

    n = host.nodes
    pgs = pg_groups(host.process_groups)
    rows = []
    seq: dict[str | None, int] = {}
    only_pg = pgs[0] if len(pgs) == 1 else None
    for nid, name in zip(n["id"].to_list(), n["name"].to_list(), strict=True):
        if not name.startswith(("gloo:", "nccl:", "rccl:", "hccl:")):
            continue
        ct = C.coll_type_of(name)
        shapes, types, _ = host.io.get(nid, (None, None, None))
        cnt, ty = C.first_tensor(shapes, types)
        dt, size = C.dtype_info(ty)
        gsize = only_pg.size if only_pg is not None and only_pg.size else None
        if ct in ("all_gather", "gather"):
            cnt = cnt * gsize if (cnt is not None and gsize) else None
        cnt = 0 if ct == "barrier" else cnt
        pg = only_pg.name if only_pg is not None else None
        s = seq.get(pg, 0)
        seq[pg] = s + 1
        rows.append(
            {
                "id": nid,
                "_nt": C.node_type_of(ct),
                "coll_type": ct,
                "num_elems": cnt,
                "dtype": None if ct == "barrier" else dt,
                "comm_bytes": 0 if ct == "barrier" else (cnt * size if cnt is not None and size else None),
                "pg_name": pg,
                "coll_seq": s,
            }
        )
    nodes = (
        n.rename({"et_tid": "tid"})
        .drop("scope")
        .with_columns(
            pl.when(pl.col("name") == PG_INIT)
            .then(pl.lit("METADATA"))
            .otherwise(pl.lit("COMP"))
            .alias("node_type"),
            pl.lit(False).alias("on_gpu"),
        )
    )
    if rows:
        cf = pl.DataFrame(
            rows,
            schema={
                "id": pl.Int64,
                "_nt": pl.String,
                "coll_type": pl.String,
                "num_elems": pl.Int64,
                "dtype": pl.String,
                "comm_bytes": pl.Int64,
                "pg_name": pl.String,
                "coll_seq": pl.Int64,
            },
        )
        nodes = (
            nodes.join(cf, on="id", how="left", maintain_order="left")
            .with_columns(pl.coalesce("_nt", "node_type").alias("node_type"))
            .drop("_nt")
        )
    ctrl = nodes.filter(pl.col("parent").is_not_null()).select(
        pl.col("id").alias("node"), pl.col("parent").alias("dep"), pl.lit("ctrl").alias("kind")
    )
    deps = pl.concat([ctrl.cast(DEP_SCHEMA), data_deps(host)])  # type: ignore[arg-type]
    report = {
        "source": "host_et",
        "host_et": host.path,
        "nodes": nodes.height,
        "link_method": "none (host ET only, no timestamps)",
        "comm_nodes": len(rows),
        "data_deps": int((deps["kind"] == "data").sum()),
    }
    meta = TraceMeta(
        has_timestamps=False,
        clock="none",
        source="host_et",
        source_schema=f"pytorch host ET {host.schema}" if host.schema else "pytorch host ET",
        process_groups=pgs,
        extra={"convert": report, "pid": host.pid},
    )
    return Trace(nodes=nodes, deps=deps, meta=meta), report
