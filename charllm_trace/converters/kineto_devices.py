"""Device activity of accelerators whose Kineto events use categories we do not list.

Kineto writes NVIDIA and AMD device activity under ``kernel`` / ``gpu_memcpy`` / ``gpu_memset``
(:data:`~charllm_trace.converters.kineto_profile.CATEGORY_KIND`). Other accelerators (Ascend NPU,
Gaudi HPU, XPU, MTIA ...) record theirs under categories of their own. The generic rule: a
complete event of a category we do not know is device activity when it carries ``args.stream``
and it ran on a device: it has ``args.device``, or its pid is a device process by the profile's
metadata (a ``process_labels`` or ``process_name`` record naming an accelerator, e.g. ``GPU 0``,
``NPU 0``, ``HPU``). Such an event becomes kind ``memcpy`` / ``memset`` when its name says so,
else ``kernel`` (compute or communication, as classified later), on the device's stream.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import polars as pl

#: a process label or name that names an accelerator (not the host CPU)
DEVICE_PROCESS_RE = re.compile(
    r"(?i)\b(?:gpu|npu|hpu|xpu|mtia|tpu|ipu|mlu|dcu|gaudi|ascend|habana|accelerator|device)s?\b"
)
#: metadata records that name a process
PROCESS_RECORDS = ("process_labels", "process_name")
#: device activity named as a copy / a fill (case-insensitive)
MEMCPY_RE = r"(?i)memcpy|memcopy|^dma\b|^copy\b"
MEMSET_RE = r"(?i)memset|^fill\b"


class _MetaArgs(msgspec.Struct, gc=False):
    name: Any = None
    labels: Any = None


class _Meta(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    name: Any = None
    pid: Any = None
    args: _MetaArgs | None = None


def _meta_decoder(phases: tuple[str, ...]) -> msgspec.json.Decoder:
    union: Any = _Meta
    for ph in phases:
        if ph != "M":
            union = union | msgspec.defstruct(f"_MSkip{ord(ph)}", [], gc=False, tag_field="ph", tag=ph)
    return msgspec.json.Decoder(list[union])


class ProcessNames:
    """The process labels and names of a profile's metadata records, pid -> texts."""

    def __init__(self, phases: tuple[str, ...] = ()) -> None:
        self.texts: dict[int, list[str]] = {}
        self._dec = _meta_decoder(phases) if phases else None

    def add(self, name: Any, pid: Any, args: Any) -> None:
        if name not in PROCESS_RECORDS or type(pid) is not int or not -(2**31) <= pid < 2**31:
            return
        key = "labels" if name == "process_labels" else "name"
        v = args.get(key) if isinstance(args, dict) else getattr(args, key, None)
        if isinstance(v, str) and v:
            self.texts.setdefault(pid, []).append(v)

    def add_batch(self, data: Any) -> None:
        """The metadata records of a JSON list of events (bytes or a buffer)."""
        evs: list[Any]
        try:
            if self._dec is None:
                raise msgspec.ValidationError
            evs = [e for e in self._dec.decode(data) if e.__class__ is _Meta]
        except (msgspec.ValidationError, msgspec.DecodeError):
            try:  # an odd batch (unlisted phases ...): the generic decode, metadata only
                raw = msgspec.json.decode(data)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                return
            evs = (
                [e for e in raw if isinstance(e, dict) and e.get("ph") == "M"]
                if isinstance(raw, list)
                else []
            )
            for e in evs:
                self.add(e.get("name"), e.get("pid"), e.get("args"))
            return
        for e in evs:
            self.add(e.name, e.pid, e.args)

    def device_pids(self) -> dict[int, str]:
        """pid -> the label or name that makes it a device process."""
        out: dict[int, str] = {}
        for pid, texts in self.texts.items():
            hit = next(
                (t for t in texts if DEVICE_PROCESS_RE.search(t) and not re.search(r"(?i)\bcpu\b", t)), None
            )
            if hit is not None:
                out[pid] = hit
        return out


def mark_device_activity(events: pl.DataFrame, device_pids: dict[int, str]) -> pl.DataFrame:
    """Events of unknown categories (kind ``other``) that are device activity by the module's
    rule become GPU rows (``on_gpu``), typed ``kernel``, ``memcpy`` or ``memset``. Run before
    ``gpu_columns`` (which takes their device from the pid and their stream from args or tid)."""
    # a device index (not anything an odd profile writes there: the rule adds no new refusals)
    on_device = pl.col("device").is_between(-(2**31), 2**31 - 1).fill_null(False)
    if device_pids:
        on_device = on_device | pl.col("pid").is_in(list(device_pids))
    hit = (pl.col("kind") == "other") & pl.col("stream").is_not_null() & on_device
    if not events.select(hit.any()).item():
        return events
    name = pl.col("name").fill_null("")
    kind = (
        pl.when(name.str.contains(MEMCPY_RE))
        .then(pl.lit("memcpy"))
        .when(name.str.contains(MEMSET_RE))
        .then(pl.lit("memset"))
        .otherwise(pl.lit("kernel"))
    )
    return events.with_columns(
        pl.when(hit).then(kind).otherwise(pl.col("kind")).alias("kind"),
        (pl.col("on_gpu") | hit).alias("on_gpu"),
    )
