"""External GPU telemetry logs (nvidia-smi, dcgmi dmon, amd-smi, rocm-smi, Zeus) read into the
model's ``TELEMETRY_SCHEMA`` and attached to a run directory or written into a Chakra ET.

Importers are converters: they read text files and never load NVML or AMD SMI.
``read_log(path, "nvidia-smi", ParseOptions(tz="Europe/Berlin"))`` returns an ``ImportedLog``
(both types in :mod:`charllm_trace.telemetry_import.common`);
:mod:`charllm_trace.telemetry_import.attach` puts its samples where the loaders find them.
See docs/telemetry-import.md for the formats, the commands that record them and clock alignment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from charllm_trace.telemetry_import.common import ImportedLog, ParseOptions

#: the formats ``read_log`` reads (the ``--format`` choices); this module imports no polars, so the
#: CLI can list them without loading it
FORMATS = ("nvidia-smi", "dcgm", "amd-smi", "rocm-smi", "zeus")

__all__ = ["FORMATS", "read_log"]


def read_log(path: str | os.PathLike[str], fmt: str, opts: ParseOptions | None = None) -> ImportedLog:
    """Read one tool's log. Raises :class:`~charllm_trace.core.errors.InputError` for a bad log."""
    from charllm_trace.telemetry_import.common import ParseOptions

    opts = opts or ParseOptions()
    p = Path(path)
    if fmt == "nvidia-smi":
        from charllm_trace.telemetry_import.nvidia_smi import parse
    elif fmt == "dcgm":
        from charllm_trace.telemetry_import.dcgm import parse
    elif fmt == "amd-smi":
        from charllm_trace.telemetry_import.amd_smi import parse
    elif fmt == "rocm-smi":
        from charllm_trace.telemetry_import.rocm_smi import parse
    elif fmt == "zeus":
        from charllm_trace.telemetry_import.zeus import parse
    else:
        raise ValueError(f"unknown telemetry log format {fmt!r} (one of {', '.join(FORMATS)})")
    return parse(p, opts)
