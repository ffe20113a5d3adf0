"""The comparison engine behind ``check``: baseline metrics versus a new run's.

Every key in either side gets one status:

- ``regressed``: moved the wrong way by more than the class's tolerance;
- ``improved``: moved the right way by more than the tolerance;
- ``within``: moved no more than the tolerance;
- ``missing``: in the baseline, absent from the new run;
- ``new``: in the new run, absent from the baseline.

``check`` fails on ``regressed`` and (unless told otherwise) on ``missing``: a
metric that can no longer be computed is a change CI should see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from charllm_trace.core.errors import InputError
from charllm_trace.regress.baseline import HIGHER, METRIC_CLASSES, Metric
from charllm_trace.regress.records import fields_dict
from charllm_trace.regress.tolerance import DEFAULT_TOLERANCES, Tolerance

STATUSES = ("regressed", "improved", "within", "missing", "new")


@dataclass(frozen=True)
class MetricChange:
    """One key's comparison."""

    key: str
    cls: str
    unit: str
    direction: str
    old: float | None
    new: float | None
    status: str
    tolerance: str

    @property
    def delta(self) -> float | None:
        if self.old is None or self.new is None:
            return None
        return self.new - self.old

    @property
    def relative(self) -> float | None:
        """``(new - old) / |old|``; None when either is absent or old is 0."""
        d = self.delta
        if d is None or self.old == 0:
            return None
        return d / abs(self.old)

    def to_dict(self) -> dict[str, object]:
        names = (
            "key",
            "class",
            "unit",
            "direction",
            "old",
            "new",
            "delta",
            "relative",
            "status",
            "tolerance",
        )
        return fields_dict(self, names, {"class": "cls"})


@dataclass
class Comparison:
    """All changes, sorted by key, plus the verdict."""

    changes: list[MetricChange]
    allow_missing: bool = False
    tolerances: dict[str, Tolerance] = field(default_factory=dict)

    def by_status(self, status: str) -> list[MetricChange]:
        return [c for c in self.changes if c.status == status]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for c in self.changes:
            out[c.status] += 1
        return out

    @property
    def failures(self) -> list[MetricChange]:
        bad = {"regressed"} if self.allow_missing else {"regressed", "missing"}
        return [c for c in self.changes if c.status in bad]

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "counts": self.counts(),
            "changes": [c.to_dict() for c in self.changes],
        }


def _status(m_old: Metric, m_new: Metric, tol: Tolerance) -> str:
    if tol.allows(m_old.value, m_new.value):
        return "within"
    better = m_new.value > m_old.value if m_old.direction == HIGHER else m_new.value < m_old.value
    return "improved" if better else "regressed"


def compare(
    baseline: Iterable[Metric],
    current: Iterable[Metric],
    tolerances: Mapping[str, Tolerance] | None = None,
    *,
    allow_missing: bool = False,
    baseline_path: str | None = None,
) -> Comparison:
    """Compare ``current`` metrics against ``baseline`` ones, key by key.

    A key present on both sides with a different class, unit or direction means
    the baseline was made by an incompatible tool version: an :class:`InputError`.
    """
    tols = dict(DEFAULT_TOLERANCES)
    tols.update(tolerances or {})
    old = {m.key: m for m in baseline}
    new = {m.key: m for m in current}
    changes: list[MetricChange] = []
    for key in sorted(old.keys() | new.keys()):
        a = old.get(key)
        b = new.get(key)
        ref = a if a is not None else b
        assert ref is not None
        tol = tols[ref.cls]
        tdesc = tol.describe(METRIC_CLASSES[ref.cls].unit)
        if a is not None and b is not None:
            if (a.cls, a.unit, a.direction) != (b.cls, b.unit, b.direction):
                raise InputError(
                    baseline_path,
                    f"metric {key!r} is {a.cls} in {a.unit} ({a.direction}) in the baseline but "
                    f"{b.cls} in {b.unit} ({b.direction}) now; regenerate the baseline",
                )
            status = _status(a, b, tol)
        else:
            status = "missing" if b is None else "new"
        changes.append(
            MetricChange(
                key=key,
                cls=ref.cls,
                unit=ref.unit,
                direction=ref.direction,
                old=None if a is None else a.value,
                new=None if b is None else b.value,
                status=status,
                tolerance=tdesc,
            )
        )
    return Comparison(changes=changes, allow_missing=allow_missing, tolerances=tols)
