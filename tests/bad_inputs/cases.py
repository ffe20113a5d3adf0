"""The bad inputs and the commands each is given to (>= 150 cases; issue 15).

A case builds its input in an empty directory and returns the command line; the CLI must answer
with exit code 2 and one line ``error: ...`` holding every needle (the file's name at least).
Inputs are made on the fly from the small valid ones of :mod:`tests.bad_inputs.valid`; bombs are
built by compressing repeated bytes, so nothing large is stored in the repository.
"""

from __future__ import annotations

from tests.bad_inputs import (  # noqa: F401 - they register their cases
    cases_et,
    cases_kineto,
    cases_outputs,
    cases_results,
    cases_runs,
    cases_silent,
    cases_telemetry,
)
from tests.bad_inputs.registry import CASES, Case

__all__ = ["CASES", "Case"]
