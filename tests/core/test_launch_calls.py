"""The one launcher rule (``core.classify.launch_calls``) that the point graph's launch edges and
the Perfetto export's launch arrows share."""

from __future__ import annotations

import numpy as np

from charllm_trace.core.classify import launch_calls


def test_launch_calls_rule() -> None:
    # rows: 0 op, 1 runtime(corr 5), 2 runtime(corr 5, later), 3 kernel(corr 5, launch_id 10),
    # 4 kernel(corr 7, launch_id 10), 5 kernel(no corr, launch_id 13: a GPU row), 6 kernel(nothing),
    # 7 op (id 10), 8 runtime on the GPU (corr 9), 9 kernel (corr 9)
    ids = np.array([0, 1, 2, 13, 4, 5, 6, 10, 8, 9])
    gpu = np.array([0, 0, 0, 1, 1, 1, 1, 0, 1, 1], dtype=bool)
    runtime = np.array([0, 1, 1, 0, 0, 0, 0, 0, 1, 0], dtype=bool)
    corr = np.array([-1, 5, 5, 5, 7, -1, -1, -1, 9, 9])
    lid = np.array([-1, -1, -1, 10, 10, 13, -1, -1, -1, -1])
    got = launch_calls(ids, gpu, runtime, corr, lid)
    # the first runtime call with the correlation wins over launch_id; launch_id when no call has
    # it; a GPU row (by launch_id or a runtime row on the GPU) launches nothing; CPU rows: -1
    assert got.tolist() == [-1, -1, -1, 1, 7, -1, -1, -1, -1, -1]
    assert launch_calls(ids[:0], gpu[:0], runtime[:0], corr[:0], lid[:0]).tolist() == []
