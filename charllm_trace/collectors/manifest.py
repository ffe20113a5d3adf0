"""``manifest.json``: what was run, where, on what, and what was collected.

Written by the launcher at the start (``status: running``) and again when the command ends
(``finished``, ``failed`` with the ``failure`` in words, or ``interrupted``; the launcher's
warden process writes ``interrupted`` if the launcher itself is killed), from
the per-rank info files (``rank-<N>.info.json``, written inside the ranks), the per-node files
(``node-<host>.json``) and the telemetry metadata (``telemetry-<host>.meta.json``).
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

from charllm_trace.collectors.hook import STEP_NUMBERING, rank_file
from charllm_trace.core.errors import InputError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
CLOCK = {
    "base": "unix_epoch",
    "unit": "ns",
    "note": "all times (Kineto after adding baseTimeNanoseconds, telemetry time_ns, rank info) are "
    "time.time_ns() / CLOCK_REALTIME of the node that recorded them; nodes are as synchronised as NTP/PTP makes them",
}


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _load_all(pattern: str) -> list[dict[str, Any]]:
    out = []
    for p in sorted(glob.glob(pattern)):
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError):
            continue  # a file being rewritten or cut short: the manifest lists what it can
        if isinstance(d, dict):
            out.append(d)
    return out


def _rocm_version() -> str | None:
    for p in ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev"):
        try:
            with open(p) as f:
                return f.read().strip() or None
        except OSError:
            continue
    return None


def write_node_info(
    run_dir: Path,
    *,
    command: list[str],
    node_rank: int,
    run_id: str | None = None,
    status: str = "finished",
    exit_code: int | None = None,
    launcher: dict[str, Any] | None = None,
    failure: str | None = None,
) -> dict[str, Any]:
    from charllm_trace import __version__
    from charllm_trace.collectors.telemetry.format import host_tag

    d = {
        "run_id": run_id,
        "status": status,
        "exit_code": exit_code,
        "failure": failure,
        "launcher": launcher,
        "host": socket.gethostname(),
        "node_rank": node_rank,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "charllm_trace": __version__,
        "rocm_version": _rocm_version(),
        "command": list(command),
    }
    _write_json(run_dir / f"node-{host_tag()}.json", d)
    return d


def _first(values: list[Any]) -> Any:
    for v in values:
        if v is not None:
            return v
    return None


def build_manifest(
    run_dir: Path,
    *,
    command: list[str],
    steps: tuple[int, int],
    ranks: list[int] | None,
    telemetry_hz: float,
    parallel: dict[str, int] | None,
    started_ns: int,
    node_rank: int,
    exit_code: int | None,
    finished_ns: int | None,
    run_id: str | None = None,
    launcher: dict[str, Any] | None = None,
    status: str | None = None,
    failure: str | None = None,
    interrupted_by: str | None = None,
    workload: dict[str, Any] | None = None,
    cpus: dict[str, Any] | None = None,
    step_marker: str | None = None,
    cgroup_cpu_max: dict[str, Any] | None | bool = False,
) -> dict[str, Any]:
    from charllm_trace import __version__

    rd = str(run_dir)
    infos = sorted(_load_all(os.path.join(rd, "rank-*.info.json")), key=lambda d: d.get("rank") or 0)
    nodes = _load_all(os.path.join(rd, "node-*.json"))
    tmetas = _load_all(os.path.join(rd, "telemetry-*.meta.json"))

    per_node: dict[str, list[int]] = {}
    traced: dict[str, list[int]] = {}
    files: dict[str, dict[str, str | None]] = {}
    for i in infos:
        r = i.get("rank")
        if not isinstance(r, int):
            continue
        per_node.setdefault(str(i.get("hostname")), []).append(r)
        traced[str(r)] = list(i.get("steps_traced") or [])
        files[str(r)] = {
            k: (os.path.basename(rank_file(rd, r, k)) if os.path.exists(rank_file(rd, r, k)) else None)
            for k in ("host_et", "kineto", "info")
        }
    world = _first([i.get("world_size") for i in infos])
    lws = _first([i.get("local_world_size") for i in infos])
    gpus: dict[str, list[dict[str, Any]]] = {}
    telemetry_nodes: dict[str, dict[str, Any]] = {}
    for m in tmetas:
        host = str(m.get("host"))
        gpus[host] = [
            {
                k: d.get(k)
                for k in ("index", "name", "uuid", "pci_bus_id", "power_field", "power_domain")
                if k in d
            }
            for d in m.get("devices") or []
        ]
        telemetry_nodes[host] = {
            "source": m.get("source"),
            "no_source_reason": m.get("no_source_reason"),
            "file": m.get("file"),
            "achieved_hz": m.get("achieved_hz"),
            "achieved_hz_per_device": m.get("achieved_hz_per_device"),
            "sensor_update_period_ms": m.get("sensor_update_period_ms"),
            "missed_ticks": m.get("missed_ticks"),
            "device_errors": m.get("error_counts"),
            "complete": m.get("complete"),
        }
    sinfo = [m.get("source_info") or {} for m in tmetas]
    versions = {
        "torch": _first([i.get("torch") for i in infos]),
        "cuda": _first([i.get("cuda") for i in infos]),
        "hip": _first([i.get("hip") for i in infos]),
        "nccl": _first([i.get("nccl") for i in infos]),
        "driver": _first([s.get("driver_version") for s in sinfo]),
        "cuda_driver": _first([s.get("cuda_driver_version") for s in sinfo]),
        "rocm": _first([s.get("rocm_version") for s in sinfo] + [n.get("rocm_version") for n in nodes]),
        "python": _first([n.get("python") for n in nodes]) or sys.version.split()[0],
        "charllm_trace": __version__,
    }
    rank_devices = {
        str(i["rank"]): i.get("device") for i in infos if isinstance(i.get("rank"), int) and i.get("device")
    }
    par: dict[str, Any] | None = None
    if parallel:
        par = dict(parallel)
        prod = 1
        for k in ("tp", "pp", "dp", "cp"):
            prod *= parallel.get(k, 1)
        par["product_tp_pp_dp_cp"] = prod
        par["matches_world_size"] = None if world is None else prod == world
    if status is None:
        status = "running" if exit_code is None else "finished" if exit_code == 0 else "failed"
    hosts = sorted(set(per_node) | set(gpus) | {str(n.get("host")) for n in nodes})
    return {
        "manifest_version": MANIFEST_VERSION,
        "tool": f"charllm-trace {__version__}",
        "run_id": run_id,
        "status": status,
        "exit_code": exit_code,
        "failure": failure,
        "interrupted_by": interrupted_by,
        "launcher": launcher,
        "command": list(command),
        "command_line": shlex.join(command),
        "started_ns": started_ns,
        "finished_ns": finished_ns,
        "world_size": world,
        "ranks_per_node": lws,
        "ranks_by_host": {h: sorted(v) for h, v in sorted(per_node.items())},
        "hostnames": hosts,
        "nodes": len(hosts) if hosts else None,
        "gpus": gpus,
        "rank_devices": rank_devices,
        "versions": versions,
        "parallel": par,
        "workload": workload,  # collect --workload: model, micro_batch, global_batch, seq_len, tokens_per_step
        "steps": {
            "requested": list(steps),
            "numbering": STEP_NUMBERING,
            "traced": traced,
        },
        "ranks_requested": "all" if ranks is None else list(ranks),
        "ranks_traced": sorted(int(r) for r, f in files.items() if f.get("kineto")),
        "telemetry": {"requested_hz": telemetry_hz, "nodes": telemetry_nodes},
        "clock": CLOCK,
        "files": {
            "ranks": files,
            "telemetry": sorted(
                os.path.basename(p)
                for p in glob.glob(os.path.join(rd, "telemetry-*"))
                if not p.endswith(".lock")
            ),
        },
        "launcher_node_rank": node_rank,
        "cpus": cpus,  # collect --cpus: per_rank, lists (by local rank), shared, quota (collectors/cpu_alloc.py)
        "step_marker": step_marker,  # collect --step-marker: iterations are this range's occurrences
        # with --cpus or --cpu-hz: the command's cgroup cpu.max (collectors/cpu_quota.read_cpu_max)
        **({} if cgroup_cpu_max is False else {"cgroup_cpu_max": cgroup_cpu_max}),
    }


def write_manifest(run_dir: Path, **kw: Any) -> dict[str, Any]:
    m = build_manifest(run_dir, **kw)
    _write_json(Path(run_dir) / MANIFEST, m)
    return m


def read_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(run_dir) / MANIFEST
    try:
        with open(p) as f:
            d = json.load(f)
    except FileNotFoundError:
        raise InputError(p, "no manifest.json in this run directory") from None
    except OSError as exc:
        raise InputError(p, f"cannot read manifest: {exc.strerror}") from None
    except ValueError as exc:
        raise InputError(p, f"manifest is not valid JSON: {exc}") from None
    if not isinstance(d, dict) or "manifest_version" not in d:
        raise InputError(p, "not a charllm-trace manifest (no manifest_version)")
    return d
