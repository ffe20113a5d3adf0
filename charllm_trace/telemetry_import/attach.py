"""Put an imported log's samples where the loaders find them.

- A collected run directory gets ``telemetry-<host>-import.csv`` and ``.meta.json`` beside the
  sampler's files, in the sampler's format (:mod:`charllm_trace.collectors.telemetry.format`); the
  metadata says what was imported (tool, log file, rate, time zone, clock offset) and, for a device
  map, which GPU each rank used. The conversion of the run then attaches them as it attaches the
  sampler's, and an import replaces the sampler's telemetry of its node.
- Any other input (a Chakra ET, a directory of ETs, a Kineto profile) is loaded and written as a new
  ET (or directory of ETs) whose header carries the samples of each rank's GPU; the input is never
  replaced.

Which GPU a rank used: the device map (tool GPU index -> rank) when given; else the GPU index the
rank recorded (run directories: its info file; ETs: the trace's device index); else, for one rank
and a log of one GPU, that GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from charllm_trace.core.errors import InputError
from charllm_trace.core.model import Run, Trace
from charllm_trace.telemetry_import.common import ImportedLog

IMPORT_SUFFIX = "-import"
WRITTEN_BY = "charllm-trace telemetry import"
#: samples kept around a trace's time span when writing an ET (the rest of a long log is dropped)
MARGIN_NS = 1_000_000_000


@dataclass
class Attached:
    """What an import wrote: the files, each rank's GPU, and notes for the user."""

    paths: list[Path]
    rank_gpus: dict[int, int]
    notes: list[str] = field(default_factory=list)


def source_facts(log: ImportedLog, log_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The facts kept with the samples: ``ImportedLog.describe()``, the log's SHA-256 (its name
    only, not its path: no user or directory names travel with a shared trace) and who wrote them."""
    import hashlib

    with open(log_path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {**log.describe(), "log_sha256": digest, "written_by": WRITTEN_BY}


def _check_gpus(log: ImportedLog, rank_gpus: dict[int, int], where: Path) -> None:
    missing = sorted({g for g in rank_gpus.values() if g not in log.devices})
    if missing:
        raise InputError(where, f"the log has no samples of GPU {missing[0]} (it has GPUs {log.devices})")


def _span_note(samples: pl.DataFrame, start: int | None, end: int | None) -> str | None:
    if start is None or end is None or samples.height == 0:
        return None
    t = samples["time_ns"]
    inside = int(((t >= start) & (t <= end)).sum())
    if inside:
        return None
    return (
        f"no sample of the log falls inside the traced span ({(int(t.min()) - start) / 1e9:+.3f} s to "
        f"{(int(t.max()) - end) / 1e9:+.3f} s from it): check the log's time zone and the clock offset"
    )


# --- run directories --------------------------------------------------------------------------


def attach_to_run(
    run_dir: str | os.PathLike[str],
    log: ImportedLog,
    log_path: str | os.PathLike[str],
    *,
    device_map: dict[int, int] | None = None,
    host: str | None = None,
    force: bool = False,
) -> Attached:
    """Write the log's samples into ``run_dir`` as telemetry of ``host`` (default: the run's only
    host). ``device_map``: tool GPU index -> rank. Refuses to replace files it did not write."""
    from charllm_trace.collectors.telemetry.format import (
        CSV_COLUMNS,
        FORMAT,
        FORMAT_VERSION,
        host_tag,
        write_meta,
    )
    from charllm_trace.collectors.telemetry.reader import rank_devices

    d = Path(run_dir)
    ranks = rank_devices(d)
    if not ranks:
        raise InputError(d, "no rank-<N>.info.json here: not a run directory collected by charllm-trace")
    hosts = sorted({h for h, _ in ranks.values()})
    if host is None:
        if len(hosts) > 1:
            raise InputError(
                d, f"the run has {len(hosts)} nodes ({', '.join(hosts[:4])}): say which node the log is from"
            )
        host = hosts[0]
    elif host not in hosts:
        raise InputError(d, f"no rank ran on node {host!r:.40} (nodes: {', '.join(hosts[:8])})")
    on_host = sorted(r for r, (h, _) in ranks.items() if h == host)
    notes: list[str] = []
    if device_map:
        bad = sorted(set(device_map.values()) - set(on_host))
        if bad:
            raise InputError(d, f"rank {bad[0]} did not run on node {host} (its ranks: {on_host})")
        rank_gpus = {r: g for g, r in device_map.items()}
    else:
        rank_gpus = {r: ranks[r][1] for r in on_host if ranks[r][1] is not None}
        if not rank_gpus:
            raise InputError(d, "the run's ranks recorded no GPU (a CPU run?): say which GPU each rank used")
    _check_gpus(log, rank_gpus, Path(log_path))
    span = _run_span(d)
    note = _span_note(log.samples.filter(pl.col("device").is_in(list(rank_gpus.values()))), *span)
    if note:  # it would replace the sampler's samples with ones of another time
        raise InputError(
            Path(log_path), note.replace("traced span", "run's span (manifest started/finished)")
        )
    tag = host_tag(host) + IMPORT_SUFFIX
    csv = d / f"telemetry-{tag}.csv"
    meta = d / f"telemetry-{tag}.meta.json"
    for p in (csv, meta):
        if os.path.lexists(p):
            if not force:
                raise InputError(p, "already exists (an earlier import); pass --force to replace it")
            if not _ours(meta):
                raise InputError(p, f"was not written by {WRITTEN_BY}; move it away first")
    facts = source_facts(log, log_path)
    tmp = d / f".{csv.name}.tmp-{os.getpid()}"
    log.samples.select(CSV_COLUMNS).write_csv(tmp, null_value="")
    os.replace(tmp, csv)
    write_meta(
        str(meta),
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "host": host,
            "file": csv.name,
            "source": log.tool,
            "clock": "unix_ns",
            "columns": list(CSV_COLUMNS),
            "complete": True,
            "achieved_hz": facts["rate_hz"],
            "start_ns": facts["start_ns"],
            "end_ns": facts["end_ns"],
            "devices": [
                {"index": i, **({"uuid": log.uuids[i]} if i in log.uuids else {})} for i in log.devices
            ],
            "rank_devices": {str(r): g for r, g in rank_gpus.items()} if device_map else None,
            "imported": facts,
        },
    )
    return Attached([csv, meta], rank_gpus, notes)


def _run_span(d: Path) -> tuple[int | None, int | None]:
    """The run's start and end (Unix ns) from its manifest, (None, None) when unknown."""
    import json

    from charllm_trace.core.files import read_regular

    try:
        m = json.loads(read_regular(d / "manifest.json", "a JSON manifest"))
    except (InputError, ValueError, RecursionError):
        return None, None
    if not isinstance(m, dict):
        return None, None
    a, b = m.get("started_ns"), m.get("finished_ns")
    return (a, b) if type(a) is int and type(b) is int else (None, None)


def _ours(meta: Path) -> bool:
    from charllm_trace.collectors.telemetry.format import read_meta

    try:
        m = read_meta(meta)
    except InputError:
        return False
    imp = m.get("imported")
    return isinstance(imp, dict) and imp.get("written_by") == WRITTEN_BY


# --- ETs and Kineto profiles ------------------------------------------------------------------


def _rank_gpus_of(
    run: Run, log: ImportedLog, device_map: dict[int, int] | None, where: Path
) -> dict[int, int]:
    if device_map:
        bad = sorted(set(device_map.values()) - set(run.ranks))
        if bad:
            raise InputError(where, f"the trace has no rank {bad[0]} (ranks: {run.ranks})")
        return {r: g for g, r in device_map.items()}
    out = {r: run.traces[r].meta.device_index for r in run.ranks}
    if all(g is not None and g in log.devices for g in out.values()):
        return {r: int(g) for r, g in out.items() if g is not None}
    if len(run.ranks) == 1 and len(log.devices) == 1:
        return {run.ranks[0]: log.devices[0]}
    raise InputError(
        where,
        f"cannot tell which of the log's GPUs {log.devices} each rank used (ranks {run.ranks}): give a device map",
    )


def with_telemetry(
    trace: Trace, log: ImportedLog, gpu: int, facts: dict[str, Any]
) -> tuple[Trace, str | None]:
    """``trace`` with the samples of tool GPU ``gpu`` (within a second of its span) as its telemetry,
    labelled with the GPU the trace's operators ran on, and the import's facts in ``meta.extra``."""
    import dataclasses

    n = trace.nodes
    start = n["start_ns"].min()
    end = (n["start_ns"] + n["dur_ns"]).max()
    smp = log.samples.filter(pl.col("device") == gpu)
    note = _span_note(log.samples.filter(pl.col("device") == gpu), start, end)
    if start is not None and end is not None:
        smp = smp.filter(pl.col("time_ns").is_between(int(start) - MARGIN_NS, int(end) + MARGIN_NS))
    used = n.filter(pl.col("on_gpu").fill_null(False))["device"].drop_nulls().unique().to_list()
    label = (
        used[0] if len(used) == 1 else trace.meta.device_index if trace.meta.device_index is not None else gpu
    )
    smp = smp.with_columns(pl.lit(label, dtype=smp.schema["device"]).alias("device"))
    extra = {**trace.meta.extra, "telemetry_source": {**facts, "tool_gpu": gpu, "samples": smp.height}}
    meta = dataclasses.replace(trace.meta, extra=extra)
    return Trace(nodes=trace.nodes, deps=trace.deps, telemetry=smp, meta=meta), note


def default_output(path: Path, multi: bool) -> Path:
    name = path.name
    for suf in (".json.gz", ".json", ".et.gz", ".et"):
        if name.lower().endswith(suf):
            name = name[: -len(suf)]
            break
    return path.with_name(name + (".telemetry" if multi else ".telemetry.et"))


def write_with_telemetry(
    source: str | os.PathLike[str],
    log: ImportedLog,
    log_path: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    device_map: dict[int, int] | None = None,
    force: bool = False,
) -> Attached:
    """Load ``source`` (ET, ET directory, Kineto profile) and write it with the log's samples as a
    new ET (a directory of ``rank-<N>.et`` for several ranks). The input is never replaced; an
    existing output is replaced only with ``force`` and only if this command wrote it."""
    from charllm_trace.inputs.loader import load

    src = Path(source)
    run = load(src)
    multi = len(run.ranks) > 1
    out = Path(output) if output is not None else default_output(src, multi)
    if os.path.lexists(out) and os.path.lexists(src) and os.path.samefile(out, src):
        raise InputError(out, "is the input itself: write the ET with telemetry to a new file")
    untimed = [r for r in run.ranks if not run.traces[r].meta.has_timestamps]
    if untimed:
        raise InputError(
            src,
            f"rank {untimed[0]} has no timestamps (start times all 0): samples cannot be placed on its "
            "timeline (a simulated one has no wall clock either)",
        )
    rank_gpus = _rank_gpus_of(run, log, device_map, Path(log_path))
    _check_gpus(log, rank_gpus, Path(log_path))
    facts = source_facts(log, log_path)
    traces: dict[int, Trace] = {}
    notes: list[str] = []
    for r in run.ranks:
        if r in rank_gpus:
            traces[r], note = with_telemetry(run.traces[r], log, rank_gpus[r], facts)
            if note and traces[r].telemetry.height < 2:
                raise InputError(Path(log_path), f"GPU {rank_gpus[r]} (rank {r}): {note}")
            if note:
                notes.append(f"rank {r}: {note}")
        else:
            traces[r] = run.traces[r]
            notes.append(f"rank {r}: no GPU of the log mapped to it; left without telemetry")
    new = Run(traces=traces, manifest=run.manifest, source=str(out))
    if multi:
        from charllm_trace.et.writer import write_run

        paths = write_run(new, out, overwrite=force)
        return Attached(paths, rank_gpus, notes)
    from charllm_trace.et.writer import write_et

    if os.path.lexists(out):
        if not force:
            raise InputError(out, "already exists; pass --force to replace an ET this command wrote")
        if not _ours_et(out):
            raise InputError(out, f"was not written by {WRITTEN_BY}; refusing to replace it")
    write_et(traces[run.ranks[0]], out, overwrite=True, manifest=dict(run.manifest) or None)
    return Attached([out], rank_gpus, notes)


def _ours_et(path: Path) -> bool:
    from charllm_trace.et.reader import read_et

    try:
        tr = read_et(path, cache=False)
    except InputError:
        return False
    src = tr.meta.extra.get("telemetry_source")
    return isinstance(src, dict) and src.get("written_by") == WRITTEN_BY
