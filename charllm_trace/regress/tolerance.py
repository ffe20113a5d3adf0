"""Tolerances for ``check``: how far a metric may move before it counts.

``--tolerance overlap=2pp,busbw=5%,energy=5%`` sets the tolerance of some
metric classes; the others keep :data:`DEFAULT_TOLERANCES`. A bound is

- ``N%``: relative, ``|new - old| <= N/100 * |old|``;
- ``Npp``: absolute percentage points, for classes measured in % (overlap);
- ``N<unit>``: absolute, in a unit of the class (``ms``/``us``/``ns``/``s`` for
  times, ``J``/``kJ`` for energy, ``W`` for power, ``GB/s`` for bandwidth).

Bounds can be joined with ``+`` (``throttle=5%+100ms``): a change is within
tolerance when it is within any of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from charllm_trace.core.errors import UsageError
from charllm_trace.regress.baseline import METRIC_CLASSES

#: Absolute units each class accepts, with the factor to the class's own unit.
_ABS_UNITS: dict[str, dict[str, float]] = {
    "overlap": {"pp": 1.0},
    "exposed_comm": {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3},
    "throttle": {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3},
    "busbw": {"gb/s": 1.0},
    "energy": {"mj": 1e-3, "j": 1.0, "kj": 1e3},
    "power": {"mw": 1e-3, "w": 1.0, "kw": 1e3},
}

_BOUND = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z%/]+)\s*$")


@dataclass(frozen=True)
class Tolerance:
    """Allowed movement of one class: relative (fraction) and/or absolute (class unit)."""

    relative: float | None = None
    absolute: float | None = None

    def allows(self, old: float, new: float) -> bool:
        delta = abs(new - old)
        if self.absolute is not None and delta <= self.absolute + 1e-12 * max(1.0, abs(old)):
            return True
        if self.relative is not None:
            if old == 0:
                return delta == 0
            return delta <= self.relative * abs(old) * (1 + 1e-12)
        return delta == 0

    def describe(self, unit: str) -> str:
        parts = []
        if self.relative is not None:
            parts.append(f"{_num(self.relative * 100)}%")
        if self.absolute is not None:
            parts.append(f"{_num(self.absolute)}pp" if unit == "%" else f"{_num(self.absolute)} {unit}")
        return "+".join(parts) if parts else "exact"


def _num(x: float) -> str:
    return f"{x:.6g}"


#: Tolerances used for classes the user does not name. Policy, see docs/regressions.md.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "overlap": Tolerance(absolute=2.0),
    "exposed_comm": Tolerance(relative=0.05),
    "busbw": Tolerance(relative=0.05),
    "energy": Tolerance(relative=0.05),
    "power": Tolerance(relative=0.05),
    "throttle": Tolerance(relative=0.05, absolute=100.0),
}

assert set(DEFAULT_TOLERANCES) == set(METRIC_CLASSES)


def _parse_bound(cls: str, text: str) -> tuple[str, float]:
    m = _BOUND.match(text)
    if not m:
        raise UsageError(f"--tolerance {cls}={text}: expected a number with a unit, e.g. 5% or 2pp")
    value = float(m.group(1))
    unit = m.group(2).lower()
    if not math.isfinite(value):
        raise UsageError(f"--tolerance {cls}={text}: not a finite number")
    if unit == "%":
        return "relative", value / 100.0
    factors = _ABS_UNITS[cls]
    if unit not in factors:
        allowed = ", ".join(["%"] + [u if u == "pp" else u.replace("gb/s", "GB/s") for u in factors])
        raise UsageError(f"--tolerance {cls}={text}: unit {m.group(2)!r} does not fit {cls} (use {allowed})")
    return "absolute", value * factors[unit]


def parse_tolerances(spec: str | None) -> dict[str, Tolerance]:
    """Parse ``class=bound[+bound],...`` into a full class -> Tolerance map (defaults filled in)."""
    out = dict(DEFAULT_TOLERANCES)
    if spec is None or not spec.strip():
        return out
    named: set[str] = set()
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise UsageError(f"--tolerance: {item!r} is not CLASS=VALUE (e.g. overlap=2pp,busbw=5%)")
        cls, _, value = item.partition("=")
        cls = cls.strip().lower().replace("-", "_")
        if cls not in METRIC_CLASSES:
            raise UsageError(f"--tolerance: unknown class {cls!r} (known: {', '.join(METRIC_CLASSES)})")
        if cls in named:
            raise UsageError(f"--tolerance: {cls} given twice")
        named.add(cls)
        rel: float | None = None
        ab: float | None = None
        for part in value.split("+"):
            kind, v = _parse_bound(cls, part)
            if kind == "relative":
                if rel is not None:
                    raise UsageError(f"--tolerance {cls}={value}: two relative bounds")
                rel = v
            else:
                if ab is not None:
                    raise UsageError(f"--tolerance {cls}={value}: two absolute bounds")
                ab = v
        out[cls] = Tolerance(relative=rel, absolute=ab)
    return out


def format_tolerances(tols: Mapping[str, Tolerance]) -> str:
    """The inverse of :func:`parse_tolerances` (for messages and docs)."""
    return ",".join(f"{c}={t.describe(METRIC_CLASSES[c].unit)}" for c, t in tols.items())
