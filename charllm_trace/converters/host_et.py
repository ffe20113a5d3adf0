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
    stack = [values]
    while stack:
        v = stack.pop()
        if type(v) is not list:
            continue
        if len(v) == 6 and type(v[0]) is int and type(v[1]) is int and type(v[5]) is str:
            out.append(f"{v[0]}:{v[1]}")
            continue
        stack.extend(x for x in v if type(x) is list)


def _attr_map(node: dict[str, Any]) -> dict[str, Any]:
    attrs = node.get("attrs")
    if isinstance(attrs, list):
        return {a.get("name"): a.get("value") for a in attrs if isinstance(a, dict)}
    return {}


#: host-ET schemas read here: PyTorch's 1.0.x and the 1.1.x ones (``1.1.1-chakra.0.0.4``)
SUPPORTED_SCHEMA = re.compile(r"1\.[01]\.\d+(?:-[\w.]+)?")


def _check_ids(path: str | os.PathLike[str], raw: list[dict[str, Any]]) -> None:
    """Node ids are unique 64-bit integers, checked before any join on them (a file whose ids are all
    equal made the converter's joins grow without bound)."""
    ids = [n["id"] for n in raw]
    bad = next((i for i in ids if not 0 <= i < 2**63), None)
    if bad is not None:
        raise InputError(path, f"host ET node id {bad} is not a 64-bit id >= 0")
    s = pl.Series(ids, dtype=pl.Int64)
    dup = s.value_counts(sort=True).filter(pl.col("count") > 1)
    if dup.height:
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


def _node_fields(n: dict[str, Any]) -> tuple[Any, ...]:
    """(input values, shapes, types, output values, shapes, types, parent, rf_id, tid, scope,
    extra attributes) of a node in either schema."""
    if isinstance(n.get("inputs"), dict):  # 1.1.x
        am = _attr_map(n)
        iv = n["inputs"].get("values", [])
        ish = n["inputs"].get("shapes", [])
        ity = n["inputs"].get("types", [])
        o = n.get("outputs") or {}
        ov, osh, oty = o.get("values", []), o.get("shapes", []), o.get("types", [])
        extra = {k: v for k, v in am.items() if k not in ("rf_id", "tid")}
        return (
            iv,
            ish,
            ity,
            ov,
            osh,
            oty,
            n.get("ctrl_deps"),
            am.get("rf_id"),
            am.get("tid"),
            am.get("scope"),
            extra,
        )
    iv, ish, ity = n.get("inputs", []), n.get("input_shapes", []), n.get("input_types", [])
    ov, osh, oty = n.get("outputs", []), n.get("output_shapes", []), n.get("output_types", [])
    extra = {k: n[k] for k in ("fw_parent", "seq_id", "scope", "fw_tid", "op_schema") if k in n}
    return iv, ish, ity, ov, osh, oty, n.get("parent"), n.get("rf_id"), n.get("tid"), n.get("scope"), extra


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
    _check_ids(path, raw)
    check_fields(path, raw)
    ids, names, parents, rf_ids, tids, scopes = [], [], [], [], [], []
    in_j, out_j, attrs_j = [], [], []
    io: dict[int, tuple[Any, Any, Any]] = {}
    t_in_node, t_in_key, t_out_node, t_out_key = [], [], [], []
    pgs: list[dict[str, Any]] = []
    for n in raw:
        nid = n["id"]
        iv, ish, ity, ov, osh, oty, parent, rf, tid, scope, extra = _node_fields(n)
        name = str(n.get("name", ""))
        ids.append(nid)
        names.append(name)
        parents.append(parent if isinstance(parent, int) and parent != nid else None)
        rf_ids.append(rf if isinstance(rf, int) else None)
        tids.append(tid if isinstance(tid, int) else None)
        scopes.append(scope if isinstance(scope, int) else None)
        # The process-group node keeps PyTorch's JSON text as it is (see pg_init_values); every
        # other node's values list is written as JSON.
        pg_text = iv[0] if name == PG_INIT and isinstance(iv, list) and len(iv) == 1 else None
        in_v = pg_init_values(pg_text) if isinstance(pg_text, str) else orjson.dumps(iv).decode()
        in_j.append((in_v, orjson.dumps(ish).decode(), orjson.dumps(ity).decode()))
        out_j.append((orjson.dumps(ov).decode(), orjson.dumps(osh).decode(), orjson.dumps(oty).decode()))
        attrs_j.append(orjson.dumps(extra).decode() if extra else None)
        io[nid] = (ish, ity, iv)
        ks: list[str] = []
        _tensor_keys(iv, ks)
        t_in_node.extend([nid] * len(ks))
        t_in_key.extend(ks)
        ks = []
        _tensor_keys(ov, ks)
        t_out_node.extend([nid] * len(ks))
        t_out_key.extend(ks)
        if name == PG_INIT:
            pgs.extend(_process_groups(iv))
    io_struct = pl.Struct({"values": pl.String, "shapes": pl.String, "types": pl.String})
    nodes = pl.DataFrame(
        {
            "id": pl.Series(ids, dtype=pl.Int64),
            "name": pl.Series(names, dtype=pl.String),
            "parent": pl.Series(parents, dtype=pl.Int64),
            "rf_id": pl.Series(rf_ids, dtype=pl.Int64),
            "et_tid": pl.Series(tids, dtype=pl.Int64),
            "scope": pl.Series(scopes, dtype=pl.Int64),
            "inputs": pl.Series(
                [{"values": a, "shapes": b, "types": c} for a, b, c in in_j], dtype=io_struct
            ),
            "outputs": pl.Series(
                [{"values": a, "shapes": b, "types": c} for a, b, c in out_j], dtype=io_struct
            ),
            "attrs": pl.Series(attrs_j, dtype=pl.String),
        }
    )
    # A parent that is not a node of this trace (the implicit root) is no parent.
    nodes = nodes.with_columns(
        pl.when(pl.col("parent").is_in(nodes["id"].implode())).then(pl.col("parent")).alias("parent"),
        pl.when(pl.col("scope") == USER_SCOPE)
        .then(pl.lit("annotation"))
        .otherwise(pl.lit("cpu_op"))
        .alias("kind"),
    )
    check_parent_cycle(path, nodes)
    pid = doc.get("pid") if isinstance(doc.get("pid"), int) else None
    return HostET(
        path=os.fspath(path),
        schema=schema,
        pid=pid,
        nodes=nodes,
        io=io,
        tensors_in=pl.DataFrame(
            {"node": pl.Series(t_in_node, dtype=pl.Int64), "tensor": pl.Series(t_in_key, dtype=pl.String)}
        ),
        tensors_out=pl.DataFrame(
            {"node": pl.Series(t_out_node, dtype=pl.Int64), "tensor": pl.Series(t_out_key, dtype=pl.String)}
        ),
        process_groups=pgs,
        time=doc.get("time") if isinstance(doc.get("time"), str) else None,
    )


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
