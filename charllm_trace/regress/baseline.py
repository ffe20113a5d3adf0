"""The baseline file: a run's headline figures, versioned JSON.

A baseline is a flat list of :class:`Metric` rows, each with a stable key
(``overlap_pct/rank=0/step=5``), a class that decides its tolerance, a unit, a
value and a direction. ``charllm-trace baseline`` writes one, ``check`` reads
it back and compares a new run against it (:mod:`charllm_trace.regress.compare`).

File layout (``docs/regressions.md`` has an example)::

    {
      "format": "charllm-trace-baseline",
      "version": 1,
      "tool_version": "0.1.0",
      "input": {"path": "...", "ranks": [0, 1], ...},
      "metrics": [
        {"key": "overlap_pct/rank=0/step=5", "class": "overlap", "unit": "%",
         "value": 61.2, "direction": "higher-is-better"},
        ...
      ]
    }
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from charllm_trace.analysis.energy_methods import ENERGY_METHODS
from charllm_trace.core.errors import InputError
from charllm_trace.regress.records import fields_dict

FORMAT = "charllm-trace-baseline"
FORMAT_VERSION = 1

HIGHER = "higher-is-better"
LOWER = "lower-is-better"
DIRECTIONS = (HIGHER, LOWER)


@dataclass(frozen=True)
class MetricClass:
    """A family of metrics sharing a unit, a direction and a tolerance."""

    name: str
    unit: str
    direction: str
    what: str


#: The metric classes, their one unit each, and which way is better.
METRIC_CLASSES: dict[str, MetricClass] = {
    c.name: c
    for c in (
        MetricClass("overlap", "%", HIGHER, "share of communication time hidden under compute"),
        MetricClass("exposed_comm", "ms", LOWER, "communication time not overlapped by compute"),
        MetricClass("busbw", "GB/s", HIGHER, "median bus bandwidth (nccl-tests convention)"),
        MetricClass("energy", "J", LOWER, "GPU energy attributed to a class of operators"),
        MetricClass("power", "W", LOWER, "GPU power draw (peak or mean)"),
        MetricClass("throttle", "ms", LOWER, "time the GPU clocks were held back"),
    )
}


@dataclass(frozen=True)
class Metric:
    """One headline figure. ``key`` is stable across runs of the same job."""

    key: str
    cls: str
    unit: str
    value: float
    direction: str

    def __post_init__(self) -> None:
        if self.cls not in METRIC_CLASSES:
            raise ValueError(f"unknown metric class {self.cls!r} (known: {', '.join(METRIC_CLASSES)})")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be {HIGHER!r} or {LOWER!r}, not {self.direction!r}")
        if not isinstance(self.value, (int, float)) or isinstance(self.value, bool):
            raise ValueError(f"value must be a number, not {self.value!r}")
        if not math.isfinite(self.value):
            raise ValueError(f"value must be finite, not {self.value!r}")
        if not self.key or any(ch.isspace() for ch in self.key):
            raise ValueError(f"key must be non-empty with no spaces, not {self.key!r}")

    @classmethod
    def of(cls, key: str, metric_class: str, value: float) -> Metric:
        """A metric whose unit and direction are its class's."""
        c = METRIC_CLASSES[metric_class]
        return cls(key=key, cls=metric_class, unit=c.unit, value=float(value), direction=c.direction)

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self, ("key", "class", "unit", "value", "direction"), {"class": "cls"})


@dataclass
class Baseline:
    """What ``baseline`` writes: the metrics plus where they came from."""

    metrics: list[Metric]
    input: dict[str, Any] = field(default_factory=dict)
    tool_version: str = ""
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for m in self.metrics:
            if m.key in seen:
                raise ValueError(f"duplicate metric key {m.key!r}")
            seen.add(m.key)

    def by_key(self) -> dict[str, Metric]:
        return {m.key: m for m in self.metrics}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "tool_version": self.tool_version,
            "input": self.input,
            "metrics": [m.to_dict() for m in sorted(self.metrics, key=lambda m: m.key)],
        }


def make_baseline(metrics: Iterable[Metric], input_desc: Mapping[str, Any] | None = None) -> Baseline:
    from charllm_trace import __version__

    return Baseline(metrics=list(metrics), input=dict(input_desc or {}), tool_version=__version__)


def write_baseline(baseline: Baseline, path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write ``baseline`` as indented JSON. Refuses to overwrite unless ``force``."""
    p = Path(path)
    if p.exists() and not force:
        raise InputError(p, "already exists; pass --force to overwrite it")
    if p.parent and not p.parent.is_dir():
        raise InputError(p.parent, "no such directory")
    p.write_bytes(orjson.dumps(baseline.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")
    return p


#: The median bus bandwidth's key prefix (one name per statistic: ``analyze``'s aggregate is
#: ``busbw_time_weighted_gbps``); baselines written before the rename said ``busbw_gbps/``.
BUSBW_MEDIAN = "busbw_median_gbps/"
LEGACY_BUSBW = "busbw_gbps/"


def baseline_from_dict(d: Any, path: str | os.PathLike[str] | None = None) -> Baseline:
    """Validate a parsed baseline document; every problem is an :class:`InputError`."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise InputError(path, f'not a charllm-trace baseline (no "format": "{FORMAT}")')
    version = d.get("version")
    if version != FORMAT_VERSION:
        raise InputError(
            path,
            f"baseline format version {version!r} is not supported "
            f"(this charllm-trace reads version {FORMAT_VERSION}); regenerate it with `charllm-trace baseline`",
        )
    raw = d.get("metrics")
    if not isinstance(raw, list):
        raise InputError(path, 'baseline has no "metrics" list')
    metrics: list[Metric] = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise InputError(path, f"metric #{i} is not an object")
        try:
            key = m["key"]
            if isinstance(key, str) and key.startswith(LEGACY_BUSBW):  # written before the rename
                key = BUSBW_MEDIAN + key[len(LEGACY_BUSBW) :]
            metric = Metric(
                key=key, cls=m["class"], unit=m["unit"], value=m["value"], direction=m["direction"]
            )
        except KeyError as exc:
            raise InputError(path, f"metric #{i} has no {exc.args[0]!r}") from None
        except (ValueError, TypeError, AttributeError) as exc:
            raise InputError(path, f"metric #{i} ({m.get('key')!r:.60}): {exc}") from None
        expected = METRIC_CLASSES[metric.cls].unit
        if metric.unit != expected:
            raise InputError(
                path, f"metric {metric.key!r}: unit {metric.unit!r}, expected {expected!r} for {metric.cls}"
            )
        metrics.append(metric)
    inp = d.get("input", {})
    if not isinstance(inp, dict):
        raise InputError(
            path, f'"input" is {type(inp).__name__ if inp is not None else "null"}, expected an object'
        )
    _check_options(inp.get("options"), path)
    try:
        return Baseline(
            metrics=metrics,
            input=inp,
            tool_version=str(d.get("tool_version", "")),
            version=version,
        )
    except (ValueError, TypeError) as exc:
        raise InputError(path, str(exc)) from None


#: the analysis options a baseline may record (``input.options``) and the values each may take
_OPTION_VALUES: dict[str, tuple[Any, ...]] = {
    "hta_compat": (True, False),
    "simulate": (True, False),
    "energy_method": ENERGY_METHODS,
}


def _check_options(opts: Any, path: str | os.PathLike[str] | None) -> None:
    if opts is None:
        return
    if not isinstance(opts, dict):
        raise InputError(path, f'"input.options" is {type(opts).__name__}, expected an object')
    for k, v in opts.items():
        allowed = _OPTION_VALUES.get(k)
        if allowed is None:
            raise InputError(
                path, f'"input.options" has an unknown option {k!r} (known: {", ".join(_OPTION_VALUES)})'
            )
        if not any(v is a or (type(v) is type(a) and v == a) for a in allowed):
            raise InputError(
                path, f'"input.options.{k}" is {v!r}; expected one of {", ".join(repr(a) for a in allowed)}'
            )


def read_baseline(path: str | os.PathLike[str]) -> Baseline:
    """Read and validate a baseline file. Raises :class:`InputError` for anything wrong with it."""
    from charllm_trace.core.files import read_regular

    p = Path(path)
    data = read_regular(p, "a baseline JSON file")
    if not data.strip():
        raise InputError(p, "file is empty")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(p, f"not valid JSON ({exc})") from None
    return baseline_from_dict(doc, p)
