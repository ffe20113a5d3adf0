"""Compiled parts of charllm-trace, built when the package is installed.

Everything else is declared in pyproject.toml; setuptools reads ``ext_modules`` from here.
Nothing is compiled at run time (docs/native.md).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
#: the extension-module stub both ctypes helpers include
STUB = "charllm_trace/core/_ctypes_stub.h"


def ctypes_helper(module: str, sources: list[str], headers: tuple[str, ...] = ()) -> Extension:
    """A plain C library that charllm-trace calls through ctypes, built as an extension module
    (its first source has a stub ``PyInit_<name>``) so that pip compiles it and the import system
    places it. ``SOURCE_SHA256`` (of the sources, then the headers, concatenated) lets a test
    tell a build that is older than its sources."""
    digest = hashlib.sha256(b"".join((HERE / f).read_bytes() for f in [*sources, *headers])).hexdigest()
    return Extension(
        module,
        sources=sources,
        depends=list(headers),
        define_macros=[("CHARLLM_SOURCE_SHA256", f'"{digest}"')],
        extra_compile_args=["-O2"],
    )


setup(
    ext_modules=[
        Extension(
            "charllm_trace.core._dag",
            sources=["charllm_trace/core/_dag.c"],
            extra_compile_args=["-O2"],
        ),
        # the ET scanner and node encoder (et/_native.py); the Kineto JSON framer (converters/jsonframe.py) and
        # event decoder (converters/kineto_native.py)
        ctypes_helper(
            "charllm_trace.et._etscan", ["charllm_trace/et/_etscan.c", "charllm_trace/et/_etwrite.c"], (STUB,)
        ),
        ctypes_helper(
            "charllm_trace.converters._jsonframe",
            ["charllm_trace/converters/_jsonframe.c", "charllm_trace/converters/_jsondecode.c"],
            ("charllm_trace/converters/_swar.h", STUB),
        ),
    ]
)
