"""Read Chakra ET files (ours or anyone's) into the trace model.

``read_et`` reads one file into a :class:`~charllm_trace.core.model.Trace`;
``read_et_dir`` reads a directory of per-rank files into a
:class:`~charllm_trace.core.model.Run`. Both raise :class:`InputError` for bad
input (truncated, corrupt, not an ET, ranks that do not belong together).
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import polars as pl
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from charllm_trace.core.errors import InputError
from charllm_trace.core.limits import MAX_TELEMETRY_ROWS
from charllm_trace.core.model import (
    TELEMETRY_SCHEMA,
    ProcessGroup,
    Run,
    Trace,
    TraceMeta,
)
from charllm_trace.et import _native
from charllm_trace.et import cache as et_cache
from charllm_trace.et import conventions as cv
from charllm_trace.et import schema as pb
from charllm_trace.et.fastdecode import PAD, Corrupt, decode_nodes
from charllm_trace.et.framing import (
    GZIP_MAGIC,
    MalformedVarint,
    Truncated,
    decode_varint,
    message_bounds,
    read_bytes,
    sniff_text,
)
from charllm_trace.et.reference_rows import attr_value, nodes_frame
from charllm_trace.et.validate import check_graph, check_node_count, check_times, check_versions, one_producer

_I64 = np.int64

# ---------------------------------------------------------------------------
# GlobalMetadata
# ---------------------------------------------------------------------------


def _meta_from_global(gm: pb.GlobalMetadata, path: Any) -> tuple[TraceMeta, pl.DataFrame, dict | None, bool]:
    """(meta, telemetry, run manifest, ours) from the GlobalMetadata message."""
    attrs: dict[str, Any] = {}
    for a in gm.attr:
        attrs[a.name] = attr_value(a)
    ours = cv.M_MODEL_VERSION in attrs
    manifest = None
    if not ours:
        extra: dict[str, Any] = {k: v for k, v in attrs.items()}
        if gm.version:
            extra["et_version"] = gm.version
        schema = attrs.get("schema")
        meta = TraceMeta(
            source="chakra-et",
            source_schema=schema if isinstance(schema, str) else (gm.version or None),
            extra=extra,
        )
        return meta, pl.DataFrame(schema=TELEMETRY_SCHEMA), None, False
    try:
        pgs = tuple(
            ProcessGroup(name=p["name"], desc=p.get("desc"), ranks=tuple(p.get("ranks") or ()))
            for p in orjson.loads(attrs.get(cv.M_PROCESS_GROUPS) or "[]")
        )
        extra = orjson.loads(attrs[cv.M_EXTRA]) if cv.M_EXTRA in attrs else {}
        if cv.M_RUN in attrs:
            manifest = orjson.loads(attrs[cv.M_RUN])
            if not isinstance(manifest, dict):
                raise TypeError(f"{cv.M_RUN} is not a JSON object")
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(path, f"corrupt charllm metadata in the ET header ({exc})") from exc
    meta = TraceMeta(
        rank=attrs.get(cv.M_RANK),
        world_size=attrs.get(cv.M_WORLD_SIZE),
        device_model=attrs.get(cv.M_DEVICE_MODEL),
        device_index=attrs.get(cv.M_DEVICE_INDEX),
        hostname=attrs.get(cv.M_HOSTNAME),
        has_timestamps=bool(attrs.get(cv.M_HAS_TIMESTAMPS, True)),
        clock=attrs.get(cv.M_CLOCK, "unix_ns"),
        source=attrs.get(cv.M_SOURCE, "unknown"),
        source_schema=attrs.get(cv.M_SOURCE_SCHEMA),
        model_version=attrs[cv.M_MODEL_VERSION],
        process_groups=pgs,
        extra=extra,
    )
    rows = attrs.get(cv.M_TELEMETRY_ROWS) or 0
    if type(rows) is not int or not 0 <= rows <= MAX_TELEMETRY_ROWS:
        raise InputError(
            path, f"{cv.M_TELEMETRY_ROWS} is {rows!r}, expected a count from 0 to {MAX_TELEMETRY_ROWS:,}"
        )
    cols: dict[str, Any] = {}
    for col, dtype in TELEMETRY_SCHEMA.items():
        vals = attrs.get(cv.M_TELEMETRY_COL + col)
        if vals is None:
            cols[col] = pl.Series(col, [None] * rows, dtype=dtype)
            continue
        if len(vals) != rows:
            raise InputError(path, f"telemetry column {col} has {len(vals)} values, expected {rows}")
        valid = attrs.get(cv.M_TELEMETRY_COL + col + cv.M_TELEMETRY_VALID)
        try:
            s = pl.Series(col, vals).cast(dtype)
            if valid is not None:
                mask = pl.Series(valid)
                if mask.dtype != pl.Boolean or mask.len() != rows:
                    raise TypeError(
                        f"validity is {mask.len()} values of {mask.dtype}, expected {rows} booleans"
                    )
                s = pl.select(pl.when(mask).then(s).otherwise(None).alias(col)).to_series()
        except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as exc:
            raise InputError(path, f"corrupt telemetry column {col} in the ET header ({exc})") from exc
        cols[col] = s
    telemetry = pl.DataFrame(cols, schema=TELEMETRY_SCHEMA) if rows else pl.DataFrame(schema=TELEMETRY_SCHEMA)
    return meta, telemetry, manifest, True


# ---------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------


def parse_messages(data: bytes, path: Any) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    """GlobalMetadata and every Node of an ET, or ``InputError``."""
    text = sniff_text(data)
    if text:
        raise InputError(path, text)
    starts, lens = message_bounds(data, path)
    if len(starts) == 0:
        raise InputError(path, "not a Chakra ET: no messages")
    gm = pb.GlobalMetadata()
    try:
        gm.ParseFromString(data[starts[0] : starts[0] + lens[0]])
    except DecodeError as exc:
        raise InputError(path, f"not a Chakra ET: the first message is not a GlobalMetadata ({exc})") from exc
    nodes: list[pb.Node] = []
    for k in range(1, len(starts)):
        n = pb.Node()
        try:
            n.ParseFromString(data[starts[k] : starts[k] + lens[k]])
        except DecodeError as exc:
            raise InputError(
                path, f"corrupt: message {k} (at byte {int(starts[k])}) is not a Chakra Node ({exc})"
            ) from exc
        nodes.append(n)
    return gm, nodes


def decode_et_reference(data: bytes, path: Any = None) -> tuple[Trace, dict | None]:
    """The same as :func:`decode_et` through the protobuf runtime, one node at a time.

    Slow; kept as an independent implementation the tests compare the fast decoder with.
    """
    gm, nodes = parse_messages(data, path)
    check_versions(gm, path)
    meta, telemetry, manifest, ours = _meta_from_global(gm, path)
    df, deps, has_ts = nodes_frame(nodes, ours, meta.rank)
    if not ours:
        meta.has_timestamps = has_ts
        meta.clock = "unix_ns" if has_ts else "none"
    trace = Trace(nodes=df, deps=deps, telemetry=telemetry, meta=meta)
    check_node_count(gm, trace.nodes.height, path)
    check_graph(trace, path, ours)
    check_times(trace, path)
    return trace, manifest


def load_buffer(path: str | os.PathLike[str]) -> tuple[np.ndarray, int]:
    """(buffer, size): the uncompressed bytes of ``path`` as a uint8 array.

    With the C scanner, an uncompressed file is memory-mapped (private, read-only,
    pre-faulted): no copy, and string columns point into the mapping. Like polars'
    own memory-mapped IPC reading, this assumes the file is not truncated in place
    while the trace is in use (our writer replaces files atomically). Otherwise
    (gzip, or the numpy decoder, which reads a little past message ends) the bytes
    are copied into an array followed by ``PAD`` zero bytes.
    """
    from charllm_trace.core.files import open_regular

    p = Path(path)
    try:
        with open_regular(p, "a Chakra ET file") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(2)
            if size == 0 or not head:
                raise InputError(p, "file is empty")
            if head == GZIP_MAGIC:
                raw = read_bytes(p)  # decompresses, with gzip errors as InputError
                arr = np.zeros(len(raw) + PAD, dtype=np.uint8)
                arr[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
                return arr, len(raw)
            if _native.lib() is not None and os.environ.get("CHARLLM_TRACE_MMAP", "1") != "0":
                flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)
                mm = mmap.mmap(f.fileno(), size, flags=flags, prot=mmap.PROT_READ)
                return np.frombuffer(mm, dtype=np.uint8), size
            arr = np.empty(size + PAD, dtype=np.uint8)
            arr[:2] = np.frombuffer(head, dtype=np.uint8)
            got = 2
            view = memoryview(arr)
            while got < size:
                k = f.readinto(view[got:size])
                if not k:
                    break
                got += k
    except OSError as exc:
        raise InputError(p, f"cannot read the file ({exc.strerror or exc})") from exc
    arr = arr[: got + PAD]
    arr[got:] = 0
    return arr, got


def decode_et(buf: np.ndarray, size: int, path: Any = None) -> tuple[Trace, dict | None]:
    """A Trace (and the run manifest, if the file has one) from the first ``size`` bytes of ``buf``."""
    text = sniff_text(buf[: min(size, 4096)].tobytes())
    if text:
        raise InputError(path, text)
    # the first message: the GlobalMetadata
    try:
        length, pos = decode_varint(buf, 0, size)
    except Truncated as exc:
        raise InputError(path, "truncated: the file ends inside the first message length") from exc
    except MalformedVarint as exc:
        raise InputError(path, "not a Chakra ET: malformed first message length") from exc
    if pos + length > size:
        raise InputError(path, "not a Chakra ET: its first message would run past the end of the file")
    gm = pb.GlobalMetadata()
    try:
        gm.ParseFromString(buf[pos : pos + length].tobytes())
    except DecodeError as exc:
        raise InputError(path, f"not a Chakra ET: the first message is not a GlobalMetadata ({exc})") from exc
    if (not gm.version and not len(gm.attr)) or len(UnknownFieldSet(gm)):
        raise InputError(path, "not a Chakra ET: the first message is not a Chakra GlobalMetadata")
    check_versions(gm, path)
    meta, telemetry, manifest, ours = _meta_from_global(gm, path)
    try:
        cols = decode_nodes(buf, pos + length, size, ours=ours, path=path)
    except Corrupt as exc:
        where = f"message {exc.where}" if exc.where >= 0 else ""
        if exc.problem.startswith(("truncated", "not a Chakra ET")):
            raise InputError(path, f"{exc.problem} ({where})" if where else exc.problem) from exc
        raise InputError(path, f"corrupt Chakra ET: {where + ': ' if where else ''}{exc.problem}") from exc
    if not ours:
        meta.has_timestamps = cols.any_start
        meta.clock = "unix_ns" if cols.any_start else "none"
    trace = Trace(nodes=cols.frame, deps=cols.deps, telemetry=telemetry, meta=meta)
    check_node_count(gm, trace.nodes.height, path)
    check_graph(trace, path, ours)
    check_times(trace, path)
    return trace, manifest


def read_et(path: str | os.PathLike[str], *, cache: bool = True) -> Trace:
    """Read one Chakra ET file (``.et`` or gzip-compressed) into a Trace."""
    trace, _ = read_et_with_manifest(path, cache=cache)
    return trace


def read_et_with_manifest(path: str | os.PathLike[str], *, cache: bool = True) -> tuple[Trace, dict | None]:
    """:func:`read_et` and the run manifest its header carries (None without one)."""
    if cache:
        hit = et_cache.lookup(path)
        if hit is not None:
            return hit
    buf, size = load_buffer(path)
    trace, manifest = decode_et(buf, size, path)
    if cache:
        et_cache.store(path, et_cache.content_key(buf[:size]), trace, manifest)
    return trace, manifest


# ---------------------------------------------------------------------------
# Directories of per-rank files
# ---------------------------------------------------------------------------

_RANK_PATTERNS = (
    re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)", re.IGNORECASE),  # rank-3.et, trace_rank3.et
    re.compile(r"\.(\d+)\.et(?:\.gz)?$", re.IGNORECASE),  # Chakra's converter: name.3.et
    re.compile(r"(\d+)\.et(?:\.gz)?$", re.IGNORECASE),  # anything ending in a number
)


def rank_from_name(name: str) -> int | None:
    """The rank a file name states (``rank-3.et``, ``trace.3.et``, ``et_3.et``), or None."""
    for pat in _RANK_PATTERNS:
        m = pat.search(name)
        if m:
            return int(m.group(1))
    return None


def et_files(path: Path) -> list[Path]:
    """The ``.et`` / ``.et.gz`` files of a directory (each a regular file, or ``InputError``)."""
    from charllm_trace.core.files import trace_entries

    return trace_entries(path, (".et", ".et.gz"))


def _file_rank(trace: Trace, f: Path) -> int:
    """The rank of a file: ``charllm.rank`` from its header, else the number in its name (noted
    in the trace's ``extra``)."""
    rank = trace.meta.rank
    if rank is not None:
        return rank
    rank = rank_from_name(f.name)
    if rank is None:
        raise InputError(
            f,
            "cannot tell its rank: no charllm.rank in the header and no number in the file name (name it rank-<N>.et)",
        )
    trace.meta.rank = rank
    trace.meta.extra["rank_from"] = "file name"
    return rank


class _OneRun:
    """The world size and manifest the files read so far agree on (with the file that said so);
    a file that disagrees mixes two runs."""

    def __init__(self) -> None:
        self.world: int | None = None
        self.world_from: Path | None = None
        self.manifest: dict | None = None
        self.manifest_from: Path | None = None

    def add(self, f: Path, ws: int | None, man: dict | None) -> None:
        if ws is not None:
            if self.world is not None and ws != self.world:
                raise InputError(
                    f,
                    f"mixes two runs: world size {ws} but {self.world_from.name if self.world_from else '?'} says {self.world}",
                )
            self.world, self.world_from = ws, f
        if man is None:
            return
        if self.manifest is not None and man.get("run_id") != self.manifest.get("run_id"):
            raise InputError(
                f,
                f"mixes two runs: run id {man.get('run_id')!r} but "
                f"{self.manifest_from.name if self.manifest_from else '?'} has {self.manifest.get('run_id')!r}",
            )
        if self.manifest is None:
            self.manifest, self.manifest_from = man, f


def read_et_dir(
    path: str | os.PathLike[str], *, cache: bool = True, only: Collection[int] | None = None
) -> Run:
    """Read a directory of per-rank Chakra ETs into a Run.

    The rank of a file is ``charllm.rank`` from its header; files without one
    (Chakra's own converter writes none) take it from the file name. Files that
    do not belong to one run are refused: two files with the same rank,
    different world sizes or run ids, or a rank outside the world size.
    ``only``: read just the files of these ranks (``--ranks`` / ``--sample``), told by the rank
    in the file name (a file without one is read, and kept when its header names a wanted rank).
    """
    from charllm_trace.core.files import path_kind

    d = Path(path)
    if path_kind(d) != "dir":
        raise InputError(d, "is not a directory")
    files = et_files(d)
    if not files:
        raise InputError(d, "no Chakra ET (.et) files in this directory")
    if only is not None:
        keep = set(only)
        files = [f for f in files if rank_from_name(f.name) in keep or rank_from_name(f.name) is None]
    traces: dict[int, Trace] = {}
    origin: dict[int, Path] = {}
    run = _OneRun()
    for f in files:
        trace, man = read_et_with_manifest(f, cache=cache)
        rank = _file_rank(trace, f)
        if rank in traces:
            raise InputError(f, f"mixes two runs: rank {rank} again (also in {origin[rank].name})")
        run.add(f, trace.meta.world_size, man)
        traces[rank] = trace
        origin[rank] = f
    one_producer(traces, origin)
    world = run.world
    if world is not None:
        outside = [r for r in traces if r >= world]
        if outside:
            raise InputError(origin[outside[0]], f"rank {outside[0]} is outside the world size {world}")
    if only is not None:
        traces = {r: t for r, t in traces.items() if r in keep}
    return Run(traces=traces, manifest=run.manifest or {}, source=str(d))
