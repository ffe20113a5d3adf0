"""Regression guard: headline metrics of a run, baselines, ``check`` and ``diff``.

- :mod:`.baseline`: the metric record and the versioned baseline file;
- :mod:`.tolerance`: ``--tolerance overlap=2pp,busbw=5%`` and the defaults;
- :mod:`.compare`: the comparison engine (regressed / improved / within / missing / new);
- :mod:`.headline`: which metrics a run's analysis yields, each extracted in one place;
- :mod:`.diff`: two runs side by side.
"""

from charllm_trace.regress.baseline import (
    FORMAT_VERSION,
    METRIC_CLASSES,
    Baseline,
    Metric,
    read_baseline,
    write_baseline,
)
from charllm_trace.regress.compare import Comparison, MetricChange, compare
from charllm_trace.regress.tolerance import DEFAULT_TOLERANCES, Tolerance, parse_tolerances

__all__ = [
    "DEFAULT_TOLERANCES",
    "FORMAT_VERSION",
    "METRIC_CLASSES",
    "Baseline",
    "Comparison",
    "Metric",
    "MetricChange",
    "Tolerance",
    "compare",
    "parse_tolerances",
    "read_baseline",
    "write_baseline",
]
