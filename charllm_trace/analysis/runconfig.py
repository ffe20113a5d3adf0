"""The configuration of a run, one row (``RunConfig``): what ``compare`` lists per run.

Each field is taken from the first of these that has it; a field none of them has is null:

============================  ==========================================================
field                         from
============================  ==========================================================
``run_id``                    manifest ``run_id``
``model``, ``micro_batch``,   manifest ``workload`` (``collect --workload``): ``model``,
``global_batch``, ``seq_len`` ``micro_batch``, ``global_batch``, ``seq_len``
``tokens_per_step``           ``workload.tokens_per_step``, else ``global_batch × seq_len``
``tp cp pp dp ep``            the layout the analysis used (``AnalyzeOptions.parallel``,
                              else manifest ``parallel``)
``world_size``                manifest, else the ranks' trace metadata
``nodes``                     manifest ``nodes``, else the distinct host names of the ranks
                              when every rank of the world is present and named
``gpus``                      manifest ``rank_devices`` (distinct devices of the ranks), else
                              the ranks with a GPU model when every rank of the world is
                              present
``device``                    the ranks' device models (distinct, joined by ``, ``), else the
                              manifest's telemetry device names
============================  ==========================================================

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from charllm_trace.analysis.results import CONFIG_SCHEMA, RunConfig, frame
from charllm_trace.core.model import Run, TraceMeta
from charllm_trace.core.numbers import int_value

#: ``workload`` keys of the manifest, and the column each fills
WORKLOAD_KEYS = {
    "model": "model",
    "micro_batch": "micro_batch",
    "global_batch": "global_batch",
    "seq_len": "seq_len",
    "tokens_per_step": "tokens_per_step",
}
PARALLEL_KEYS = ("tp", "cp", "pp", "dp", "ep")


def _int(v: Any) -> int | None:
    """A count of the manifest: a string only when it is all digits (no sign)."""
    if isinstance(v, str) and not v.strip().isdigit():
        return None
    return int_value(v)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def _devices(metas: Sequence[TraceMeta], manifest: Mapping[str, Any]) -> tuple[str | None, int | None]:
    models = sorted({m.device_model for m in metas if m.device_model})
    device = ", ".join(models) if models else None
    if device is None:
        names = sorted(
            {
                str(g.get("name"))
                for gs in (manifest.get("gpus") or {}).values()
                if isinstance(gs, list)
                for g in gs
                if isinstance(g, dict) and g.get("name")
            }
        )
        device = ", ".join(names) if names else None
    rd = manifest.get("rank_devices")
    gpus = None
    if isinstance(rd, dict) and rd:
        keys = {
            str(d.get("uuid") or f"rank {r}") if isinstance(d, dict) else f"rank {r}" for r, d in rd.items()
        }
        gpus = len(keys)
    return device, gpus


def tokens_per_step(global_batch: int | None, seq_len: int | None) -> int | None:
    """Tokens per training step: global batch (sequences) × sequence length; null when either is unknown."""
    return global_batch * seq_len if global_batch is not None and seq_len is not None else None


def run_config(run: Run, layout: Mapping[str, int] | None = None) -> RunConfig:
    """The configuration of ``run``; ``layout``: the parallel layout the analysis used."""
    return run_config_of(run.manifest, [t.meta for t in run], layout)


def run_config_of(
    manifest: object, metas: Sequence[TraceMeta], layout: Mapping[str, int] | None = None
) -> RunConfig:
    """:func:`run_config` from the run's manifest and its ranks' metadata (in rank order): all the
    driver has of a run analysed on workers."""
    man: Mapping[str, Any] = manifest if isinstance(manifest, dict) else {}
    notes: list[str] = []
    world = _int(man.get("world_size"))
    if world is None:
        world = next((m.world_size for m in metas if m.world_size is not None), None)
    whole = world is not None and len(metas) == world  # every rank of the world is here
    nodes = _int(man.get("nodes"))
    if nodes is None and whole and all(m.hostname for m in metas):
        nodes = len({m.hostname for m in metas})
    device, gpus = _devices(metas, man)
    if gpus is None and whole and all(m.device_model for m in metas):
        gpus = len({(m.hostname or f"rank {m.rank}", m.device_index, m.rank) for m in metas})
    row: dict[str, Any] = {
        "run_id": _str(man.get("run_id")),
        "device": device,
        "world_size": world,
        "nodes": nodes,
        "gpus": gpus,
    }
    lay = layout if layout is not None else man.get("parallel")
    for k in PARALLEL_KEYS:
        row[k] = _int(lay.get(k)) if isinstance(lay, Mapping) else None
    work = man.get("workload")
    work = work if isinstance(work, dict) else {}
    for key, col in WORKLOAD_KEYS.items():
        row[col] = _str(work.get(key)) if col == "model" else _int(work.get(key))
    if row["tokens_per_step"] is None:
        row["tokens_per_step"] = tokens_per_step(row["global_batch"], row["seq_len"])
        if row["tokens_per_step"] is not None:
            notes.append("tokens per step = global batch × sequence length")
    given = [k for k in ("tp", "cp", "pp", "dp") if row[k] is not None]
    if world is not None and given:
        prod = 1
        for k in given:
            prod *= row[k]
        what = " × ".join(given)
        if len(given) == 4 and prod != world:
            notes.append(f"{what} = {prod}, not the world size {world}")
        elif world % prod:
            notes.append(f"{what} = {prod} does not divide the world size {world}")
    return RunConfig(table=frame({k: [v] for k, v in row.items()}, CONFIG_SCHEMA), notes=notes)
