"""Bad imported power logs (``telemetry import``) and bad telemetry in run directories (issue 28).

Each case imports into a copy of the collected gloo run (tests/fixtures), whose manifest spans
the Zeus fixture log's times, or analyses a run whose telemetry was edited afterwards. Imported
telemetry is checked like the sampler's: power and energy in range, times Unix-epoch ns in int64,
samples inside the run (an import replaces the sampler's samples of its node)."""

from __future__ import annotations

from pathlib import Path

from tests.bad_inputs import valid
from tests.bad_inputs.registry import CASES, Case

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "telemetry_logs"
H200 = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "h200-1rank-nccl"
ZEUS_T0 = "1795241349.7003412"  # the first time of zeus-powermonitor.csv
MAP = ["--device-map", "0=0,1=1"]


def _log(d: Path, src: str, old: str, new: str, name: str) -> Path:
    text = (LOGS / src).read_text()
    assert old in text, (src, old)
    p = d / name
    p.write_text(text.replace(old, new))
    return p


def _import(d: Path, log: Path, fmt: str, *extra: str) -> list[str]:
    run = valid.run_dir(d)
    return ["telemetry", "import", str(run), str(log), "--format", fmt, *MAP, *extra]


def _zeus(old: str, new: str, *extra: str):
    def build(d: Path) -> list[str]:
        return _import(d, _log(d, "zeus-powermonitor.csv", old, new, "power.csv"), "zeus", *extra)

    return build


def _case(name: str, build, needles: tuple[str, ...]) -> None:
    CASES.append(Case(f"telemetry:{name}/import", build, needles))


_case("negative_power", _zeus("61.523", "-500"), ("power.csv", "power_w", "outside 0..20000"))
_case("huge_power", _zeus("61.523", "1e308"), ("power.csv", "power_w", "outside"))
_case("eleven_digit_seconds", _zeus(ZEUS_T0, "99999999000.0"), ("power.csv", "past 2262"))
_case("year_2100", _zeus("17952", "41024"), ("power.csv", "no sample of the log falls inside the run"))
_case(
    "clock_offset_huge",
    _zeus("61.523", "61.523", "--clock-offset", "99999999999999999999s"),
    ("power.csv", "clock offset"),
)
_case("clock_offset_before_1990", _zeus("61.523", "61.523", "--clock-offset", "-1795241349s"),
      ("power.csv", "clock offset"))  # fmt: skip


def _nvidia_year_9999(d: Path) -> list[str]:
    log = _log(d, "nvidia-smi-a100.csv", "2024/05/22 17:15:22.204", "9999/12/31 23:59:59.999", "smi.csv")
    return _import(d, log, "nvidia-smi", "--tz", "UTC")


_case("nvidia_smi_year_9999", _nvidia_year_9999, ("smi.csv", "9999/12/31", "int64"))


def _dcgm_interval(ms: str):
    def build(d: Path) -> list[str]:
        log = _log(d, "dcgmi-dmon.log", "#Entity", "#Entity", "dmon.log")
        return _import(d, log, "dcgm", "--start", ZEUS_T0, "--interval-ms", ms)

    return build


for _ms in ("nan", "inf", "-5", "1e300"):
    _case(f"dcgm_interval_{_ms}", _dcgm_interval(_ms), ("dmon.log", "sampling interval"))


# --- telemetry of run directories, edited after the fact ------------------------------------------


def _imported_moved_to_2100(d: Path) -> list[str]:
    from click.testing import CliRunner

    from charllm_trace.cli.app import main

    argv = _import(d, LOGS / "zeus-powermonitor.csv", "zeus")
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 0, r.output
    csv = d / "run" / "telemetry-vm-import.csv"
    csv.write_text(csv.read_text().replace("\n17952", "\n41024"))
    return ["analyze", str(d / "run")]


_case_run = "telemetry:imported_outside_run/analyze"
CASES.append(Case(_case_run, _imported_moved_to_2100, ("telemetry-vm-import.csv", "run's span")))


def _sampler_negative_power(d: Path) -> list[str]:
    import shutil

    run = d / "h200"
    shutil.copytree(H200, run)
    csv = run / "telemetry-vm.csv"
    lines = csv.read_text().split("\n")
    cells = lines[5].split(",")
    cells[2] = "-500.0"
    lines[5] = ",".join(cells)
    csv.write_text("\n".join(lines))
    return ["analyze", str(run)]


CASES.append(Case("telemetry:sampler_negative_power/analyze", _sampler_negative_power,
                  ("telemetry-vm.csv", "power_w", "outside")))  # fmt: skip
