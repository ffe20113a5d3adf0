"""Read the telemetry of a run directory into the model's ``TELEMETRY_SCHEMA``."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any

import polars as pl

from charllm_trace.collectors.telemetry.format import CSV_COLUMNS, meta_path, read_meta
from charllm_trace.collectors.telemetry.ranges import check_refused, check_times
from charllm_trace.core.errors import InputError
from charllm_trace.core.model import TELEMETRY_SCHEMA, conform, empty_frame

#: ``read_telemetry`` returns TELEMETRY_SCHEMA plus this column.
HOST_COLUMN = "host"


def read_samples(path: str | os.PathLike[str]) -> pl.DataFrame:
    """One telemetry CSV as a frame in ``TELEMETRY_SCHEMA``, sorted by device and time.

    A last line cut short (the sampler was killed mid-write) is dropped; anything else that does
    not parse is an :class:`InputError`.
    """
    from charllm_trace.core.files import read_regular

    p = Path(path)
    data = read_regular(p, "a telemetry CSV")
    header = ",".join(CSV_COLUMNS).encode()
    if not data.startswith(header):
        raise InputError(p, "not a charllm-trace telemetry CSV (unexpected header)")
    end = data.rfind(b"\n")
    data = data[: end + 1] if end >= 0 else b""
    if data.count(b"\n") <= 1:
        return empty_frame(TELEMETRY_SCHEMA)
    try:
        df = pl.read_csv(data, schema=dict(TELEMETRY_SCHEMA), has_header=True)
    except Exception as exc:
        raise InputError(p, f"telemetry CSV does not parse: {' '.join(str(exc).split())[:200]}") from None
    df = conform(df, TELEMETRY_SCHEMA)
    check_times(p, df.drop_nulls("time_ns"), low=0)
    check_refused(p, df)
    return df.sort(["device", "time_ns"])


def telemetry_metas(run_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The telemetry metadata of every node of the run, keyed by host. A log brought in by
    ``charllm-trace telemetry import`` (metadata with ``imported``) replaces the sampler's
    telemetry of its node."""
    out: dict[str, dict[str, Any]] = {}
    for mp in sorted(glob.glob(os.path.join(os.fspath(run_dir), "telemetry-*.meta.json"))):
        m = read_meta(mp)
        host = str(m.get("host"))
        if host in out and out[host].get("imported") and not m.get("imported"):
            continue
        out[host] = m
    return out


def imported_sources(run_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """What was imported per host (tool, log file, rate, time zone, offset): the ``imported``
    entry of each node's metadata, for nodes whose telemetry came from an imported log."""
    return {
        h: m["imported"] for h, m in telemetry_metas(run_dir).items() if isinstance(m.get("imported"), dict)
    }


def read_telemetry(run_dir: str | os.PathLike[str]) -> pl.DataFrame:
    """All telemetry of a run: ``TELEMETRY_SCHEMA`` columns plus ``host`` (the node's name).

    Nodes that had no power source contribute no rows (their metadata says why). Device numbers
    are the node-local indices of the telemetry source (NVML / AMD SMI order); map a rank to its
    device with :func:`rank_devices` or use :func:`telemetry_for_rank`.
    """
    frames = []
    for host, m in telemetry_metas(run_dir).items():
        if not m.get("file"):
            continue
        csv = os.path.join(os.fspath(run_dir), m["file"])  # a bare name (format.read_meta)
        if not os.path.lexists(csv):
            raise InputError(csv, "telemetry file named by its metadata is missing")
        df = read_samples(csv)
        if isinstance(m.get("imported"), dict):
            _check_import_overlaps(run_dir, csv, df)
        frames.append(df.with_columns(pl.lit(host, dtype=pl.String).alias(HOST_COLUMN)))
    if not frames:
        return empty_frame({**TELEMETRY_SCHEMA, HOST_COLUMN: pl.String})
    return pl.concat(frames, how="vertical").sort([HOST_COLUMN, "device", "time_ns"])


def _check_import_overlaps(run_dir: str | os.PathLike[str], csv: str, df: pl.DataFrame) -> None:
    """An imported log replaces the sampler's samples of its node: refuse one with no sample inside
    the run's span (manifest ``started_ns``..``finished_ns``), whose energy would be of another time."""
    from charllm_trace.core.files import read_regular

    try:
        m = json.loads(read_regular(os.path.join(os.fspath(run_dir), "manifest.json"), "a JSON manifest"))
    except (InputError, ValueError, RecursionError):
        return  # the manifest's own reader says what is wrong with it
    a, b = (m.get("started_ns"), m.get("finished_ns")) if isinstance(m, dict) else (None, None)
    if type(a) is not int or type(b) is not int or df.height == 0:
        return
    if not df["time_ns"].is_between(a, b).any():
        raise InputError(
            csv,
            "imported telemetry has no sample inside the run's span (manifest started/finished): it "
            "would replace the sampler's samples with ones of another time; import the log again with "
            "the right --tz/--clock-offset, or move these files away",
        )


def _rank_infos(run_dir: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    from charllm_trace.core.files import read_regular

    for p in glob.glob(os.path.join(os.fspath(run_dir), "rank-*.info.json")):
        try:
            d = json.loads(read_regular(p, "a rank info file"))
        except (ValueError, RecursionError) as exc:
            raise InputError(p, f"rank info does not parse: {' '.join(str(exc).split())[:120]}") from None
        if isinstance(d, dict) and isinstance(d.get("rank"), int):
            out[d["rank"]] = d
    return out


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def rank_devices(run_dir: str | os.PathLike[str]) -> dict[int, tuple[str, int | None]]:
    """Map each traced rank to (host, telemetry device index), from the per-rank info files.

    The device is matched by GPU UUID when both the rank and the telemetry source know it (this
    is right under ``CUDA_VISIBLE_DEVICES`` remapping), else by PCI bus id, else the rank's CUDA
    ordinal is taken as the index; None when the rank ran on CPU.
    """
    metas = telemetry_metas(run_dir)
    out: dict[int, tuple[str, int | None]] = {}
    for rank, info in _rank_infos(run_dir).items():
        host = str(info.get("hostname"))
        dev = info.get("device")
        idx: int | None = None
        if isinstance(dev, dict):
            idx = dev.get("index") if type(dev.get("index")) is int else None
            devices = (metas.get(host) or {}).get("devices") or []
            uuid = _text(dev.get("uuid")).lower().removeprefix("gpu-")
            for d in devices:
                du = _text(d.get("uuid")).lower().removeprefix("gpu-")
                if uuid and du and (du == uuid or du.endswith(uuid) or uuid.endswith(du)):
                    idx = d["index"]
                    break
        mapped = (metas.get(host) or {}).get("rank_devices")  # an import's device map
        if isinstance(mapped, dict) and type(mapped.get(str(rank))) is int:
            idx = mapped[str(rank)]
        out[rank] = (host, idx)
    return out


def telemetry_for_rank(
    run_dir: str | os.PathLike[str], rank: int, telemetry: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The samples of the GPU ``rank`` ran on, in ``TELEMETRY_SCHEMA`` (empty on CPU or no source)."""
    where = rank_devices(run_dir).get(rank)
    if where is None or where[1] is None:
        return empty_frame(TELEMETRY_SCHEMA)
    tel = read_telemetry(run_dir) if telemetry is None else telemetry
    host, idx = where
    sel = tel.filter((pl.col(HOST_COLUMN) == host) & (pl.col("device") == idx))
    return conform(sel.drop(HOST_COLUMN), TELEMETRY_SCHEMA)


def telemetry_meta_path(run_dir: str | os.PathLike[str], host: str | None = None) -> str:
    return meta_path(run_dir, host)
