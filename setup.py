"""Compiled parts of charllm-trace, built when the package is installed.

Everything else is declared in pyproject.toml; setuptools reads ``ext_modules`` from here.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "charllm_trace.graph._dag",
            sources=["charllm_trace/graph/_dag.c"],
            extra_compile_args=["-O2"],
        )
    ]
)
