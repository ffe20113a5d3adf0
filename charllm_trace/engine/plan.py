"""Split an input (a local path or a URL) into the ranks a worker reads, on the driver.

The driver lists directories and, for a run directory, classifies and pairs its files by rank
(``converters/run_dir.py``: a 64 KiB peek per JSON file); it never reads a trace. Kinds:

- ``et``: one Chakra ET file of an ET directory (its rank: its header's, else its name's);
- ``et1``: a single Chakra ET file given alone (rank 0 when its header says none);
- ``json``: one Kineto profile or host ET;
- ``pair``: one rank of a run directory (its Kineto profile and/or host ET, with the directory's
  manifest and telemetry facts).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charllm_trace.core.errors import InputError
from charllm_trace.inputs.urls import is_url

ET_SUFFIXES = (".et", ".et.gz")
JSON_SUFFIXES = (".json", ".json.gz")


@dataclass
class RankSpec:
    """What one worker reads: ``files`` by role (``et``, ``json``, ``kineto``, ``host_et``)."""

    kind: str
    files: dict[str, str]
    rank: int | None = None  # known before reading (a run directory's pairing)
    root: str | None = None  # the run directory (its manifest, telemetry and rank facts)
    side: list[tuple[str, str]] = field(default_factory=list)  # (name, URL) of a URL run's other files
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """The file that names this rank in messages."""
        for role in ("et", "json", "kineto", "host_et"):
            if role in self.files:
                return self.files[role]
        return self.root or "?"


@dataclass
class Plan:
    source: str
    kind: str  # et_file | et_dir | json_file | run_dir
    specs: list[RankSpec]
    manifest: dict[str, Any] = field(default_factory=dict)


class _UrlFile(str):
    """A URL with the ``name`` the run-directory pairing uses."""

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]


def _lower_ends(name: str, suffixes: tuple[str, ...]) -> bool:
    return name.lower().endswith(suffixes)


def plan(path: str) -> Plan:
    """The ranks of the input at ``path`` (InputError for what cannot be read)."""
    if is_url(path):
        return _plan_url(path)
    from charllm_trace.core.files import path_kind, trace_entries

    p = Path(path)
    if path_kind(p) != "dir":
        if _lower_ends(p.name, JSON_SUFFIXES):
            return Plan(str(p), "json_file", [RankSpec("json", {"json": str(p)})])
        return Plan(str(p), "et_file", [RankSpec("et1", {"et": str(p)})])
    if not [e for e in p.iterdir() if not e.name.startswith(".")]:
        raise InputError(p, "directory is empty")
    ets = trace_entries(p, ET_SUFFIXES)
    if ets:
        return Plan(str(p), "et_dir", [RankSpec("et", {"et": str(f)}) for f in ets])
    if not trace_entries(p, JSON_SUFFIXES):
        raise InputError(p, "no Chakra ET (.et) files, Kineto profiles or run directory found here")
    from charllm_trace.collectors.outcome import check_one_run
    from charllm_trace.converters.run_dir import pair_files, read_manifest

    manifest = read_manifest(p)
    check_one_run(p, manifest)
    return _run_plan(str(p), manifest, pair_files(p), [])


def _run_plan(source: str, manifest: dict[str, Any], jobs: list[Any], side: list[tuple[str, str]]) -> Plan:
    specs = []
    for j in jobs:
        files = {k: str(v) for k, v in (("kineto", j.kineto), ("host_et", j.host_et)) if v is not None}
        specs.append(RankSpec("pair", files, rank=j.rank, root=source, side=side, manifest=manifest))
    return Plan(source, "run_dir", specs, manifest)


def _plan_url(url: str) -> Plan:
    from charllm_trace.inputs import urls

    if urls.url_kind(url) == "file":
        name = _UrlFile(url).name
        if _lower_ends(name, JSON_SUFFIXES):
            return Plan(url, "json_file", [RankSpec("json", {"json": url})])
        return Plan(url, "et_file", [RankSpec("et1", {"et": url})])
    entries = urls.list_dir(url)
    if not entries:
        raise InputError(url, "directory is empty")
    ets = [u for n, u, _ in entries if _lower_ends(n, ET_SUFFIXES)]
    if ets:
        return Plan(url, "et_dir", [RankSpec("et", {"et": u}) for u in ets])
    from charllm_trace.converters.run_dir import PEEK_BYTES, classify_head, is_side_file, pair_classified

    traces = [(n, u) for n, u, _ in entries if _lower_ends(n, JSON_SUFFIXES) and not is_side_file(n)]
    if not traces:
        raise InputError(url, "no Chakra ET (.et) files, Kineto profiles or run directory found here")
    side = [(n, u) for n, u, _ in entries if (n, u) not in traces]
    manifest: dict[str, Any] = {}
    if any(n == "manifest.json" for n, _ in side):
        from charllm_trace.converters.run_dir import read_manifest

        with tempfile.TemporaryDirectory(prefix="charllm-url-") as tmp:
            urls.fetch(urls.join(url, "manifest.json"), Path(tmp) / "manifest.json")
            try:
                manifest = read_manifest(Path(tmp))
            except InputError as exc:
                raise InputError(urls.join(url, "manifest.json"), exc.problem) from None
    classified = [(_UrlFile(u), *classify_head(urls.peek(u, PEEK_BYTES), n)) for n, u in traces]
    return _run_plan(url, manifest, pair_classified(url, classified), side)
