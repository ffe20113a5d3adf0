"""Kineto (PyTorch profiler) traces: the public names of the reader.

:func:`read_kineto` reads a profile file (``.json`` / ``.json.gz``) into a :class:`KinetoProfile`
(:mod:`~charllm_trace.converters.kineto_stream`, columns built by
:mod:`~charllm_trace.converters.kineto_columns`, in C by
:mod:`~charllm_trace.converters.kineto_native`); :func:`parse_kineto` gives the same from a whole
loaded document (:mod:`~charllm_trace.converters.kineto_profile`, which also has the profile's
form, times and categories).
"""

from __future__ import annotations

from charllm_trace.converters.kineto_profile import (
    CATEGORY_KIND,
    COMM_ARG_KEYS,
    SKIP_CATEGORIES,
    SYNC_ARG_KEYS,
    SYNC_CATEGORY,
    KinetoProfile,
    may_be_comm,
    parse_kineto,
    us_to_ns,
)
from charllm_trace.converters.kineto_stream import read_kineto

__all__ = [
    "CATEGORY_KIND",
    "COMM_ARG_KEYS",
    "SKIP_CATEGORIES",
    "SYNC_ARG_KEYS",
    "SYNC_CATEGORY",
    "KinetoProfile",
    "may_be_comm",
    "parse_kineto",
    "read_kineto",
    "us_to_ns",
]
