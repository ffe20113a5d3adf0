"""How a collected run ended, in words: for the launcher, its warden and readers of run
directories (``converters/run_dir.py``).

- :func:`rank_failure`: which ranks failed and how, from their ``rank-<N>.info.json`` (each rank
  records how it ended; a rank that could not, died by SIGKILL or a crash);
- :func:`orphan_ranks`, :func:`remove_rank_temporaries`: what a run left behind on this host;
- :func:`interruption`, :func:`reader_note`: ``this run was interrupted at ...`` and what is
  usable; :func:`check_one_run`: files of two runs (by run id) in one directory.

Run ids, used directories and processes are in :mod:`charllm_trace.collectors.runstate`.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from charllm_trace.collectors.runstate import launcher_gone, proc_alive, read_json

# ---------------------------------------------------------------------------
# What a run directory says about how the run ended (for readers)
# ---------------------------------------------------------------------------


def _utc(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ns / 1e9))


def last_activity_ns(run_dir: Path) -> int | None:
    """The newest modification time of the run's files (when it was last seen doing anything)."""
    best = None
    for e in os.scandir(run_dir):
        try:
            t = e.stat(follow_symlinks=False).st_mtime_ns
        except OSError:
            continue
        best = t if best is None else max(best, t)
    return best


def interruption(run_dir: Path, manifest: dict[str, Any]) -> str | None:
    """``this run was interrupted at ...`` for a run that did not end normally, else None.

    A manifest says ``interrupted`` (the collector saw it), or still says ``running`` while its
    launcher is gone (killed so hard that nothing could finish the manifest)."""
    status = manifest.get("status")
    if status == "interrupted":
        when = manifest.get("finished_ns")
        how = manifest.get("interrupted_by") or "interrupted"
        at = f" at {_utc(when)}" if isinstance(when, int) else ""
        return f"this run was interrupted{at} ({how})"
    if status == "running":
        gone = launcher_gone(manifest)
        if gone is False:
            return "this run is still being collected (its launcher is running)"
        last = last_activity_ns(run_dir)
        at = f" at {_utc(last)} (its last file change)" if last else ""
        if gone:
            return f"this run was interrupted{at}: its launcher died without finishing the manifest"
        la = manifest.get("launcher") or {}
        return (
            f"this run was interrupted{at} or is still running on {la.get('host', 'another host')}: "
            "the manifest still says running"
        )
    if status == "failed" and manifest.get("failure"):
        return f"this run failed: {manifest['failure']}"
    return None


# ---------------------------------------------------------------------------
# How the ranks ended (from their info files)
# ---------------------------------------------------------------------------


def rank_infos(run_dir: Path, run_id: str | None) -> list[dict[str, Any]]:
    """The ``rank-<N>.info.json`` of run ``run_id`` (all of them if ``run_id`` is None)."""
    out = []
    for p in sorted(run_dir.glob("rank-*.info.json")):
        d = read_json(p)
        if d is not None and isinstance(d.get("rank"), int) and (run_id is None or d.get("run_id") == run_id):
            out.append(d)
    return sorted(out, key=lambda d: d["rank"])


def rank_ending(info: dict[str, Any]) -> str | None:
    """How a rank process ended, in words; None for a normal exit."""
    ended = info.get("ended")
    where = f"pid {info.get('pid')} on {info.get('hostname')}"
    steps = info.get("steps_completed")
    after = f" after {steps} optimizer steps" if isinstance(steps, int) else ""
    if isinstance(ended, dict):
        if ended.get("how") == "signal":
            return f"rank {info['rank']} ({where}) was stopped by {ended.get('signal')}{after}"
        if ended.get("how") == "exception":
            error = " ".join(str(ended.get("error")).split())
            error = error if len(error) <= 200 else error[:199] + "…"
            return f"rank {info['rank']} ({where}) raised {error}{after}"
        return None
    if info.get("hostname") == socket.gethostname() and proc_alive(info.get("pid"), info.get("pid_start")):
        return f"rank {info['rank']} ({where}) is still running"
    # The info file was last written when the trace ended (or at start): a lower bound.
    after = f" after at least {steps} optimizer steps" if isinstance(steps, int) and steps > 0 else ""
    return (
        f"rank {info['rank']} ({where}) died without exiting{after} "
        "(killed by SIGKILL, e.g. the OOM killer, or crashed)"
    )


def rank_failure(infos: list[dict[str, Any]]) -> str | None:
    """Which ranks failed and how, the likely first cause first (a rank that died or raised comes
    before ranks stopped by a signal, which launchers send to the others after a failure)."""
    endings = [(i, rank_ending(i)) for i in infos]
    bad = [(i, e) for i, e in endings if e is not None]
    if not bad:
        return None
    order = {"died": 0, "raised": 1, "stopped": 2, "is still": 3}

    def key(item: tuple[dict[str, Any], str]) -> tuple[int, int]:
        text = item[1]
        k = min((v for w, v in order.items() if w in text), default=4)
        return k, item[0]["rank"]

    bad.sort(key=key)
    text = "; ".join(e for _, e in bad[:4])
    return text + (f"; and {len(bad) - 4} more ranks" if len(bad) > 4 else "")


def own_ranks(infos: list[dict[str, Any]], launcher_pid: int) -> list[dict[str, Any]]:
    """The infos of the ranks started under the launcher ``launcher_pid`` on this host: the only
    ones a launcher judges (another node's ranks may still be writing their last info)."""
    host = socket.gethostname()
    return [i for i in infos if i.get("hostname") == host and i.get("launcher_pid") == launcher_pid]


def orphan_ranks(
    infos: list[dict[str, Any]], launcher_pid: int | None = None
) -> list[tuple[int, int | None]]:
    """(pid, start) of this host's rank processes that are still alive (of the launcher
    ``launcher_pid`` only, if given: several launchers of one run may share a host)."""
    host = socket.gethostname()
    return [
        (i["pid"], i.get("pid_start"))
        for i in infos
        if i.get("hostname") == host
        and (launcher_pid is None or i.get("launcher_pid") == launcher_pid)
        and proc_alive(i.get("pid"), i.get("pid_start"))
    ]


def remove_rank_temporaries(run_dir: Path, infos: list[dict[str, Any]]) -> list[str]:
    """Delete the half-written ``.tmp-<pid>-rank-*`` files of this host's ranks that are gone."""
    host = socket.gethostname()
    dead = {
        i.get("pid")
        for i in infos
        if i.get("hostname") == host and not proc_alive(i.get("pid"), i.get("pid_start"))
    }
    removed = []
    for p in run_dir.glob(".tmp-*-rank-*"):
        pid = p.name.split("-", 2)[1]
        if pid.isdigit() and int(pid) in dead:
            try:
                p.unlink()
                removed.append(p.name)
            except OSError:
                pass
    return removed


# ---------------------------------------------------------------------------
# For readers of run directories (converters/run_dir.py)
# ---------------------------------------------------------------------------


def check_one_run(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Raise InputError if the run's manifest, node files and rank info files carry different
    run ids (files of two runs in one directory). Files without a run id (older collections,
    other tools) are not judged."""
    from charllm_trace.core.errors import InputError

    seen: dict[str, str] = {}
    if isinstance(manifest.get("run_id"), str):
        seen[manifest["run_id"]] = "manifest.json"
    for pat in ("node-*.json", "rank-*.info.json"):
        for p in sorted(run_dir.glob(pat)):
            d = read_json(p)
            rid = None if d is None else d.get("run_id")
            if isinstance(rid, str) and rid not in seen:
                seen[rid] = p.name
    if len(seen) > 1:
        (a, fa), (b, fb) = list(seen.items())[:2]
        raise InputError(run_dir, f"mixes two runs: {fa} has run id {a!r} but {fb} has {b!r}")


def hidden_temporaries(run_dir: Path) -> list[str]:
    """Half-written files (``.tmp-…``, a writer stopped before renaming them): never read."""
    return sorted(e.name for e in os.scandir(run_dir) if e.name.startswith(".") and ".tmp-" in e.name)


def reader_note(
    run_dir: Path, manifest: dict[str, Any], usable: list[int], partial: list[int] | None = None
) -> str | None:
    """One line for a reader of a run that did not end normally (or holds half-written files):
    what happened and what is usable; None for a run that finished cleanly."""
    what = interruption(run_dir, manifest) if manifest else None
    temps = hidden_temporaries(run_dir)
    stray = unnamed_telemetry(run_dir)
    if what is None and not temps:
        if not stray:
            return None
        return (
            f"ignored {len(stray)} telemetry CSV(s) that no telemetry metadata names ({stray[0]}): not read"
        )
    parts = [what] if what else []
    expected = sorted(
        {int(r) for r in (manifest.get("steps") or {}).get("traced", {}) if str(r).isdigit()}
        | {i["rank"] for i in rank_infos(run_dir, None)}
    )
    missing = [r for r in expected if r not in usable]
    half = [r for r in (partial or []) if r in usable]
    whole = [r for r in usable if r not in half]
    parts.append(
        f"usable: rank(s) {_ranges(whole)} (host ET and Kineto profile)"
        + (f", rank(s) {_ranges(half)} (one of the two)" if half else "")
        + (f"; rank(s) {_ranges(missing)} left no trace" if missing else "")
    )
    if temps:
        parts.append(
            f"ignored {len(temps)} half-written file(s) ({temps[0]}{', ...' if len(temps) > 1 else ''})"
        )
    if stray:
        parts.append(f"ignored {len(stray)} telemetry CSV(s) that no telemetry metadata names ({stray[0]})")
    return "; ".join(parts)


def unnamed_telemetry(run_dir: Path) -> list[str]:
    """``telemetry-*.csv`` files no ``telemetry-*.meta.json`` names: never read, so said."""
    named = set()
    for p in sorted(run_dir.glob("telemetry-*.meta.json")):
        d = read_json(p)
        if d is not None and isinstance(d.get("file"), str):
            named.add(d["file"])
    return sorted(p.name for p in run_dir.glob("telemetry-*.csv") if p.name not in named)


def _ranges(ranks: list[int]) -> str:
    out: list[str] = []
    for r in sorted(ranks):
        if out and r == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out) if out else "none"


def traced_unsaved(infos: list[dict[str, Any]]) -> str | None:
    """What the ranks' info files say they traced (``steps_traced``), for a run none of whose
    profiles was saved (killed while tracing or exporting): "rank 0 traced steps 3-400", or None."""
    parts = []
    for i in sorted(infos, key=lambda d: d.get("rank") if type(d.get("rank")) is int else -1):
        steps = [s for s in i.get("steps_traced") or [] if type(s) is int]
        if steps and type(i.get("rank")) is int:
            parts.append(f"rank {i['rank']} traced steps {_ranges(steps)}")
    if not parts:
        return None
    more = f" and {len(parts) - 4} more ranks" if len(parts) > 4 else ""
    return "; ".join(parts[:4]) + more
