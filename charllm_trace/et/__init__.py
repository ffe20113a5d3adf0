"""Chakra execution traces (.et) in and out of the trace model.

``read_et`` / ``read_et_dir`` (reader.py) and ``write_et`` / ``write_run`` (writer.py);
the mapping between the model and Chakra's schema is in conventions.py and
``docs/et-conventions.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["read_et", "read_et_dir", "write_et", "write_run"]


def __getattr__(name: str) -> Any:  # imported on first use: keeps `import charllm_trace` light
    if name in ("read_et", "read_et_dir"):
        from charllm_trace.et import reader

        return getattr(reader, name)
    if name in ("write_et", "write_run"):
        from charllm_trace.et import writer

        return getattr(writer, name)
    raise AttributeError(name)
