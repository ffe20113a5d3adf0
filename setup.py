"""Compiled parts of charllm-trace, built when the package is installed.

Everything else is declared in pyproject.toml; setuptools reads ``ext_modules`` from here.
Nothing is compiled at run time (docs/native.md).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent


def ctypes_helper(module: str, source: str) -> Extension:
    """A plain C library that charllm-trace calls through ctypes, built as an extension module
    (it has a stub ``PyInit_<name>``) so that pip compiles it and the import system places it.
    ``SOURCE_SHA256`` lets a test tell a build that is older than its source."""
    digest = hashlib.sha256((HERE / source).read_bytes()).hexdigest()
    return Extension(
        module,
        sources=[source],
        define_macros=[("CHARLLM_SOURCE_SHA256", f'"{digest}"')],
        extra_compile_args=["-O2"],
    )


setup(
    ext_modules=[
        Extension(
            "charllm_trace.graph._dag",
            sources=["charllm_trace/graph/_dag.c"],
            extra_compile_args=["-O2"],
        ),
        # the ET scanner (et/_native.py) and the Kineto JSON framer (converters/jsonframe.py)
        ctypes_helper("charllm_trace.et._etscan", "charllm_trace/et/_etscan.c"),
        ctypes_helper("charllm_trace.converters._jsonframe", "charllm_trace/converters/_jsonframe.c"),
    ]
)
