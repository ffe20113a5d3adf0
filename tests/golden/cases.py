"""The inputs whose outputs are recorded: every fixture run and every shared trace."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
# ../shared beside the project root; CHARLLM_SHARED overrides it (as in tests/conftest.py).
SHARED_TRACES = Path(os.environ.get("CHARLLM_SHARED", ROOT.parent / "shared")) / "traces"


@dataclass(frozen=True)
class Case:
    """One input: ``path`` (relative to its root) is given to every command; ``host_et`` (same root),
    when set, is passed to ``convert --host-et`` (a linked Kineto + host ET pair)."""

    name: str
    root: str  # "fixtures" or "shared"
    path: str
    host_et: str | None = None

    @property
    def base(self) -> Path:
        return FIXTURES if self.root == "fixtures" else SHARED_TRACES

    def source(self) -> Path:
        return self.base / self.path

    def host_et_source(self) -> Path | None:
        return self.base / self.host_et if self.host_et else None


FIXTURE_CASES = (
    Case("cpu-2rank-gloo", "fixtures", "traces/cpu-2rank-gloo"),
    Case("cpu-4rank-pp2-dp2", "fixtures", "traces/cpu-4rank-pp2-dp2"),
    Case("cpu-4rank-pp2-dp2-delay20", "fixtures", "traces/cpu-4rank-pp2-dp2-delay20"),
    Case("cpu-4rank-tp2-pp2", "fixtures", "traces/cpu-4rank-tp2-pp2"),
    Case("h200-1rank-nccl", "fixtures", "traces/h200-1rank-nccl"),
    Case("interventions-ar2", "fixtures", "interventions/ar2/run"),
    Case("interventions-mm2", "fixtures", "interventions/mm2/run"),
    Case("interventions-delay", "fixtures", "interventions/delay/run"),
)

SHARED_CASES = (
    Case("chakra-feeder", "shared", "chakra/feeder_tests_chakra.0.et"),
    Case("hta-a100-ddp", "shared", "hta/a100_ddp_nccl_rank0.json.gz"),
    Case("hta-mi250-minitoy", "shared", "hta/mi250_minitoy_kineto.json.gz"),
    Case(
        "hta-simple-add", "shared", "hta/simple_add_kineto.json.gz", host_et="hta/simple_add_host_et.json.gz"
    ),
    Case("hta-trace-filter-2ranks", "shared", "hta/trace_filter_2ranks"),
    Case("param-dlrm-8ranks", "shared", "param/dlrm_8ranks_v100"),
    Case("param-resnet", "shared", "param/resnet_kineto.json.gz", host_et="param/resnet_host_et.json.gz"),
    Case("tracelens-h100-qwen", "shared", "tracelens/h100_qwen1.5-0.5b_inference.json.gz"),
    Case("tracelens-mi300-qwen", "shared", "tracelens/mi300_qwen1.5-0.5b_inference.json.gz"),
)

ALL_CASES = FIXTURE_CASES + SHARED_CASES
BY_NAME = {c.name: c for c in ALL_CASES}
