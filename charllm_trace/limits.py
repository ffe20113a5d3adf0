"""Limits on what an input or an option may ask of charllm-trace (issue 15: untrusted inputs).

Generous for real jobs, small enough that a hostile or mistyped value is refused with one line
instead of exhausting memory. Each reader or option parser that enforces one names it here.
"""

from __future__ import annotations

#: ranks are numbered below this (2**20, far beyond any job): bounds what ``--ranks`` may list
#: (``analyze``, ``collect``) before anything is built from it
MAX_RANK = 1 << 20
