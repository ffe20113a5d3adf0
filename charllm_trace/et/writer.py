"""Write the trace model as Chakra ET files that Chakra's own tools read.

The file is what Chakra's ``protolib.encodeMessage`` writes: a varint length and a
``GlobalMetadata`` message, then a varint length and a ``Node`` message per node.
Standard fields are filled as the schema means them; what Chakra has no field
for goes into ``charllm.*`` attributes (see ``docs/et-conventions.md``).

The ``Node`` messages are encoded by the C encoder (``encode.py``, ``_etwrite.c``) from the
columns; :func:`iter_node_messages` builds the same messages with protobuf, node by node: the
encoder's oracle, used when ``CHARLLM_TRACE_NATIVE=0`` (docs/native.md).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import polars as pl

from charllm_trace.core.errors import InputError
from charllm_trace.core.model import TELEMETRY_SCHEMA, Run, Trace
from charllm_trace.et import conventions as cv
from charllm_trace.et import encode
from charllm_trace.et import schema as pb
from charllm_trace.et.framing import encode_varint, frame
from charllm_trace.et.pbattrs import add_extra_attrs, add_splits

_MASK64 = (1 << 64) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


# ---------------------------------------------------------------------------
# GlobalMetadata
# ---------------------------------------------------------------------------


def global_metadata(trace: Trace, manifest: Mapping[str, Any] | None = None) -> pb.GlobalMetadata:
    """The ``GlobalMetadata`` message for ``trace`` (metadata and telemetry)."""
    m = trace.meta
    gm = pb.GlobalMetadata(version=cv.ET_VERSION)
    a = gm.attr
    a.add(name=cv.M_MODEL_VERSION, string_val=m.model_version)
    a.add(name=cv.M_NODE_COUNT, int64_val=trace.nodes.height)
    if m.rank is not None:
        a.add(name=cv.M_RANK, int64_val=m.rank)
    if m.world_size is not None:
        a.add(name=cv.M_WORLD_SIZE, int64_val=m.world_size)
    if m.device_model is not None:
        a.add(name=cv.M_DEVICE_MODEL, string_val=m.device_model)
    if m.device_index is not None:
        a.add(name=cv.M_DEVICE_INDEX, int64_val=m.device_index)
    if m.hostname is not None:
        a.add(name=cv.M_HOSTNAME, string_val=m.hostname)
    a.add(name=cv.M_HAS_TIMESTAMPS, bool_val=bool(m.has_timestamps))
    a.add(name=cv.M_CLOCK, string_val=m.clock)
    a.add(name=cv.M_SOURCE, string_val=m.source)
    if m.source_schema is not None:
        a.add(name=cv.M_SOURCE_SCHEMA, string_val=m.source_schema)
    pgs = [{"name": p.name, "desc": p.desc, "ranks": list(p.ranks)} for p in m.process_groups]
    a.add(name=cv.M_PROCESS_GROUPS, string_val=orjson.dumps(pgs).decode())
    if m.extra:
        a.add(name=cv.M_EXTRA, string_val=orjson.dumps(m.extra, option=orjson.OPT_NON_STR_KEYS).decode())
    if manifest:
        a.add(name=cv.M_RUN, string_val=orjson.dumps(dict(manifest), default=str).decode())
    tel = trace.telemetry
    a.add(name=cv.M_TELEMETRY_ROWS, int64_val=tel.height)
    if tel.height:
        for col, dtype in TELEMETRY_SCHEMA.items():
            s = tel[col]
            nulls = s.null_count()
            if nulls == tel.height:
                continue  # an all-null column is simply absent
            attr = a.add(name=cv.M_TELEMETRY_COL + col)
            if dtype.is_integer():
                attr.int64_list.values.extend(s.fill_null(0).cast(pl.Int64).to_list())
            else:
                attr.double_list.values.extend(s.fill_null(0.0).cast(pl.Float64).to_list())
            if nulls:
                v = a.add(name=cv.M_TELEMETRY_COL + col + cv.M_TELEMETRY_VALID)
                v.bool_list.values.extend(s.is_not_null().to_list())
    return gm


# ---------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------


#: rows converted to Python values at a time (bounds the writer's memory)
BATCH = 32768


def _sorted_deps(trace: Trace) -> tuple[pl.DataFrame, np.ndarray]:
    """The dependencies sorted by their node's row (stable), and those rows."""
    rows = trace.nodes.select(pl.col("id"), pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"))
    deps = trace.deps.join(rows, left_on="node", right_on="id", how="left")
    if deps["_row"].null_count():
        bad = deps.filter(pl.col("_row").is_null())["node"].unique().sort().head(5).to_list()
        raise ValueError(f"dependencies of nodes that do not exist: {bad}")
    deps = deps.sort("_row", maintain_order=True)
    return deps, deps["_row"].to_numpy()


def _batches(trace: Trace):
    """(columns as Python lists, ctrl deps by id, data deps by id) for consecutive row batches."""
    nodes = trace.nodes
    deps, dep_rows = _sorted_deps(trace)
    for b0 in range(0, nodes.height, BATCH):
        cols = nodes.slice(b0, BATCH).to_dict(as_series=False)
        lo, hi = (int(x) for x in np.searchsorted(dep_rows, [b0, b0 + BATCH]))
        by_kind: dict[str, dict[int, list[int]]] = {"ctrl": {}, "data": {}}
        if hi > lo:
            g = (
                deps.slice(lo, hi - lo)
                .with_columns(
                    pl.col("dep").reinterpret(signed=False)
                )  # uint64 bit pattern, as Chakra stores ids
                .group_by("node", "kind", maintain_order=True)
                .agg(pl.col("dep"))
            )
            for node, kind, dl in g.iter_rows():
                by_kind[kind][node] = dl
        yield cols, by_kind["ctrl"], by_kind["data"]


def iter_node_messages(trace: Trace):
    """Yield one Chakra ``Node`` message per row of ``trace.nodes``."""
    _check_nodes(trace)
    for cols, ctrl, data in _batches(trace):
        yield from _node_messages(cols, ctrl, data, trace.meta.rank)


def _check_nodes(trace: Trace) -> None:
    """Refuse (ValueError) what no Chakra ET can hold: null or repeated ids, unknown types, a rank
    beyond int32 on send and receive nodes."""
    nodes = trace.nodes
    if nodes["id"].null_count():
        raise ValueError("node id is null")
    if nodes["id"].n_unique() != nodes.height:
        raise ValueError("node ids are not unique")
    types = set(nodes["node_type"].drop_nulls().unique().to_list())
    if types - set(cv.NODE_TYPE_TO_PB):
        raise ValueError(f"unknown node_type {sorted(types - set(cv.NODE_TYPE_TO_PB))}")
    rank = trace.meta.rank
    if rank is not None and not _INT32_MIN <= rank <= _INT32_MAX and types & {"COMM_SEND", "COMM_RECV"}:
        raise ValueError(f"rank {rank} does not fit the int32 comm_src/comm_dst of send and receive nodes")
    if set(trace.deps["kind"].unique().to_list()) - {"ctrl", "data"}:
        raise ValueError("dependency kind other than ctrl/data")


def _node_messages(cols: dict[str, list[Any]], ctrl: dict, data: dict, rank: int | None):
    int_names = [name for name, _ in cv.NODE_INT_ATTRS.values()]
    int_rows = zip(*[cols[c] for c in cv.NODE_INT_ATTRS], strict=True)
    str_names = list(cv.NODE_STR_ATTRS.values())
    str_rows = zip(*[cols[c] for c in cv.NODE_STR_ATTRS], strict=True)
    Node = pb.Node
    rows = zip(
        cols["id"], cols["name"], cols["node_type"], cols["start_ns"], cols["dur_ns"], cols["inputs"],
        cols["outputs"], cols["on_gpu"], cols["tid"], cols["stream"], cols["rf_id"], cols["coll_type"],
        cols["comm_bytes"], cols["pg_name"], cols["peer"], cols["in_split"], cols["out_split"], cols["attrs"],
        int_rows, str_rows, strict=True,
    )  # fmt: skip
    for (
        nid, name, ntype, start, dur, inputs, outputs, on_gpu, tid, stream, rf_id, coll, comm_bytes, pg_name,
        peer, in_split, out_split, extra, ints, strs,
    ) in rows:  # fmt: skip
        n = Node()
        n.id = nid & _MASK64
        nulls: list[str] = []
        ptype = _set_fields(n, nid, name, ntype, ctrl, data, nulls)
        _set_times(n, start, dur, inputs, outputs, nulls)
        add = n.attr.add
        _add_column_attrs(add, on_gpu, tid, stream, rf_id, coll, comm_bytes, pg_name)
        _add_peer_attrs(add, ptype, rank, peer)
        for aname, v in zip(int_names, ints, strict=True):
            if v is not None:
                add(name=aname, int64_val=v)
        for aname, v in zip(str_names, strs, strict=True):
            if v is not None:
                add(name=aname, string_val=v)
        add_splits(add, in_split, out_split)
        if nulls:
            add(name=cv.A_NULLS).string_list.values.extend(nulls)
        if extra is not None:
            add_extra_attrs(n, extra)
        yield n


def _set_fields(
    n: Any, nid: int, name: Any, ntype: Any, ctrl: dict, data: dict, nulls: list[str]
) -> int | None:
    """A node's name, type and dependencies; returns its protobuf type (None: unknown)."""
    if name is None:
        nulls.append("name")
    else:
        n.name = name
    if ntype is None:
        nulls.append("node_type")
        ptype = None
    else:
        ptype = cv.NODE_TYPE_TO_PB[ntype]
        n.type = ptype
    if nid in ctrl:
        n.ctrl_deps.extend(ctrl[nid])
    if nid in data:
        n.data_deps.extend(data[nid])
    return ptype


def _set_times(n: Any, start: Any, dur: Any, inputs: Any, outputs: Any, nulls: list[str]) -> None:
    """A node's start and duration (whole microseconds) and its inputs and outputs."""
    if start is not None and start > 0:
        n.start_time_micros = start // 1000
    if dur is not None and dur > 0:
        n.duration_micros = (dur + 500) // 1000
    if inputs is not None:
        _set_io(n.inputs, inputs, "inputs", nulls)
    if outputs is not None:
        _set_io(n.outputs, outputs, "outputs", nulls)


def _add_column_attrs(
    add: Any, on_gpu: Any, tid: Any, stream: Any, rf_id: Any, coll: Any, comm_bytes: Any, pg_name: Any
) -> None:
    """The attributes of the model's columns that Chakra names."""
    if on_gpu is not None:
        add(name=cv.A_IS_CPU_OP, bool_val=not on_gpu)
    for v, aname in ((tid, cv.A_TID), (stream, cv.A_STREAM), (rf_id, cv.A_RF_ID)):
        if v is not None:
            add(name=aname, int64_val=v)
    if coll is not None:
        if coll in cv.COLL_TO_COMM_TYPE:
            add(name=cv.A_COMM_TYPE, int64_val=cv.COLL_TO_COMM_TYPE[coll])
        else:
            add(name=cv.A_COLL_TYPE, string_val=coll)
    if comm_bytes is not None:
        add(name=cv.A_COMM_SIZE, int64_val=comm_bytes)
    if pg_name is not None:
        add(name=cv.A_PG_NAME, string_val=pg_name)


def _add_peer_attrs(add: Any, ptype: int | None, rank: int | None, peer: Any) -> None:
    """Send and receive nodes: source and destination ranks (Chakra's); others: the peer."""
    if ptype == cv.NODE_TYPE_TO_PB["COMM_SEND"]:
        if rank is not None:
            add(name=cv.A_COMM_SRC, int32_val=rank)
        if peer is not None:
            add(name=cv.A_COMM_DST, int32_val=peer)
    elif ptype == cv.NODE_TYPE_TO_PB["COMM_RECV"]:
        if peer is not None:
            add(name=cv.A_COMM_SRC, int32_val=peer)
        if rank is not None:
            add(name=cv.A_COMM_DST, int32_val=rank)
    elif peer is not None:
        add(name=cv.A_PEER, int64_val=peer)


def _set_io(msg: Any, io: dict[str, Any], fld: str, nulls: list[str]) -> None:
    msg.SetInParent()
    for sub in ("values", "shapes", "types"):
        v = io.get(sub)
        if v is None:
            nulls.append(f"{fld}.{sub}")
        else:
            setattr(msg, sub, v)


def _write_stream(f: Any, trace: Trace, manifest: Mapping[str, Any] | None) -> None:
    gm = global_metadata(trace, manifest).SerializeToString()
    f.write(frame(gm))
    if encode.available():  # the C encoder; the protobuf path below is its oracle
        _check_nodes(trace)
        deps, dep_rows = _sorted_deps(trace)
        encode.write_nodes(f.write, trace, dep_rows, deps, BATCH)
        return
    buf: list[bytes] = []
    size = 0
    for n in iter_node_messages(trace):
        b = n.SerializeToString()
        if not b:  # protolib stops at a zero-length message: mark the node
            n.attr.add(name=cv.A_PRESENT, bool_val=True)
            b = n.SerializeToString()
        buf.append(encode_varint(len(b)))
        buf.append(b)
        size += len(b)
        if size > (8 << 20):
            f.write(b"".join(buf))
            buf.clear()
            size = 0
    f.write(b"".join(buf))


def encode_et(trace: Trace, manifest: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of a Chakra ET file for ``trace`` (uncompressed)."""
    out = io.BytesIO()
    _write_stream(out, trace, manifest)
    return out.getvalue()


def write_et(
    trace: Trace,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    manifest: Mapping[str, Any] | None = None,
) -> None:
    """Write ``trace`` as a Chakra ET file (gzip-compressed when ``path`` ends in ``.gz``).

    Refuses (``InputError``) to replace an existing file unless ``overwrite``.
    The file appears atomically: it is streamed to a file beside ``path`` and renamed.
    """
    p = Path(path)
    if p.exists() and not overwrite:
        raise InputError(p, "already exists; refusing to overwrite it (use --force)")
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    try:
        if p.name.endswith(".gz"):
            with gzip.open(tmp, "wb", compresslevel=6) as f:
                _write_stream(f, trace, manifest)
        else:
            with open(tmp, "wb") as f:
                _write_stream(f, trace, manifest)
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


def rank_file_name(rank: int, *, gz: bool = False) -> str:
    return f"rank-{rank}.et" + (".gz" if gz else "")


#: the file ``write_run`` leaves in its output directory: the rank files it wrote there, so that a
#: later ``--force`` replaces (and removes) those and never a file someone else put there
RUN_MARKER = ".charllm-trace-convert"


def _marked(out: Path) -> set[str]:
    """The file names an earlier ``write_run`` wrote into ``out`` (empty: none, or no marker)."""
    import orjson

    m = out / RUN_MARKER
    try:
        doc = orjson.loads(m.read_bytes()) if m.is_file() and not m.is_symlink() else {}
    except (OSError, orjson.JSONDecodeError):
        return set()
    files = doc.get("files") if isinstance(doc, dict) else None
    return {f for f in files if isinstance(f, str) and "/" not in f} if isinstance(files, list) else set()


def _rank_files(out: Path) -> list[Path]:
    return sorted(
        p for p in out.iterdir() if re.fullmatch(r"rank-\d+\.et(?:\.gz)?", p.name, flags=re.IGNORECASE)
    )


def write_run(
    run: Run,
    out_dir: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    gz: bool = False,
) -> list[Path]:
    """Write one ``rank-<N>.et`` per rank of ``run`` into ``out_dir`` (created if needed).

    The directory's rank files are always one run's: without ``overwrite`` nothing is written if
    any ``rank-<N>.et(.gz)`` is already there; with it, the rank files an earlier ``write_run``
    wrote (listed in :data:`RUN_MARKER`) are replaced or removed, and a rank file it did not
    write is refused, never deleted.
    """
    out = Path(out_dir)
    targets, present = prepare_output(out, run.ranks, overwrite=overwrite, gz=gz)
    manifest = dict(run.manifest)
    paths = []
    for rank, p in targets:
        write_et(run.traces[rank], p, overwrite=True, manifest=manifest)
        paths.append(p)
    finish_output(out, paths, present)
    return paths


def prepare_output(
    out: Path, ranks: list[int], *, overwrite: bool, gz: bool
) -> tuple[list[tuple[int, Path]], list[Path]]:
    """Check ``out`` for ``write_run`` (module docstring) and create it: (rank, file) to write,
    and the rank files already there."""
    if out.exists() and not out.is_dir():
        raise InputError(out, "is not a directory")
    targets = [(rank, out / rank_file_name(rank, gz=gz)) for rank in ranks]
    present = _rank_files(out) if out.is_dir() else []
    if present and not overwrite:
        raise InputError(present[0], "already exists; refusing to overwrite it (use --force)")
    ours = _marked(out) if present else set()
    foreign = [p for p in present if p.name not in ours]
    if foreign:
        raise InputError(
            foreign[0],
            f"was not written by charllm-trace convert (not in {RUN_MARKER}); --force replaces only "
            "the rank files convert wrote: move it away or choose another directory",
        )
    out.mkdir(parents=True, exist_ok=True)
    return targets, present


def finish_output(out: Path, paths: list[Path], present: list[Path]) -> None:
    """Once ``paths`` are written: remove an earlier run's rank files and stale temporaries, and
    write the marker naming the rank files convert wrote."""
    import orjson

    keep = {p.name for p in paths}
    for p in present:  # an earlier run's rank files this run does not have (convert wrote them)
        if p.name not in keep:
            p.unlink()
    for p in _stale_temps(out):  # of a convert killed while writing here
        p.unlink(missing_ok=True)
    tmp = out / f"{RUN_MARKER}.tmp"
    tmp.write_bytes(orjson.dumps({"written_by": "charllm-trace convert", "files": sorted(keep)}))
    os.replace(tmp, out / RUN_MARKER)


_TEMP = re.compile(r"\.rank-\d+\.et(?:\.gz)?\.tmp-(\d+)")


def _stale_temps(out: Path) -> list[Path]:
    """Temporaries ``write_et`` left in ``out`` when killed: named as it names them, of a process
    no longer running, and holding the header it writes (``charllm.model_version``): a file of
    someone else's named so is left alone."""
    found = []
    for p in out.iterdir():
        m = _TEMP.fullmatch(p.name)
        if m is None or p.is_symlink() or not p.is_file() or _alive(int(m.group(1))):
            continue
        try:
            with open(p, "rb") as f:
                head = f.read(4096)
            if head[:2] == b"\x1f\x8b":
                head = zlib.decompressobj(31).decompress(head, 4096)
        except (OSError, zlib.error):
            continue
        if cv.M_MODEL_VERSION.encode() in head:
            found.append(p)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or a number no pid is: leave it
    return True
