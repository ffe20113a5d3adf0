"""``python -m charllm_trace``: the ``charllm-trace`` program (``cli/front.py``)."""

from charllm_trace.cli.front import program

program()
