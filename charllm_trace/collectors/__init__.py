"""Collectors: capture host ETs, Kineto profiles and GPU telemetry from training runs.

- :mod:`~charllm_trace.collectors.launcher`: ``charllm-trace collect`` (zero-code, any launcher);
- :mod:`~charllm_trace.collectors.hook`: the per-rank step tracer injected into the ranks;
- :mod:`~charllm_trace.collectors.session`: the Python API (``with Session(...) as s: ... s.step()``);
- :mod:`~charllm_trace.collectors.telemetry`: the per-node sampler process and ``read_telemetry``;
- :mod:`~charllm_trace.collectors.manifest`: ``manifest.json``;
- :mod:`~charllm_trace.collectors.runstate`, :mod:`~charllm_trace.collectors.outcome`,
  :mod:`~charllm_trace.collectors.warden`: run ids, used run directories, how a run ended.

Nothing here imports torch, pynvml or amdsmi at module level. See ``docs/collect.md``.
"""
