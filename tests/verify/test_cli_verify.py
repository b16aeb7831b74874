"""``suanli verify`` on this machine: no NVIDIA GPU here, so the CPU path, and the --json contract."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from suanli.cli import app
from tests.verify.torch_helpers import require_torch

GPU_KEYS = {"name", "memory_total_mib", "virtualization", "memory_test_ok", "tflops", "tflops_ratio", "bandwidth_gbs"}


def run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["verify", *argv], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_without_a_gpu_the_json_says_cpu_with_no_gpus_and_a_cpu_section() -> None:
    require_torch()
    code, out = run("--json", "--quick", "--no-allreduce")
    assert code == 0, out
    report = json.loads(out)
    assert report["device"] == "cpu" and report["gpus"] == [] and report["ok"] is True, report
    assert report["message"].startswith("no NVIDIA GPU here"), report
    cpu = report["cpu"]
    assert cpu["memory_test_ok"] is True and set(cpu["tflops"]) == {"fp32", "bf16"}, cpu
    assert all(v > 0 for v in cpu["tflops"].values()) and cpu["bandwidth_gbs"] > 0 and not cpu["errors"], cpu


def test_the_table_says_there_is_no_gpu_and_shows_the_cpu_figures() -> None:
    require_torch()
    code, out = run("--quick", "--no-allreduce")
    assert code == 0, out
    assert "no NVIDIA GPU here" in out and "CPU path" in out and "BF16 TFLOPS" in out, out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--min-tflops-ratio", "1.5"], "min_tflops_ratio must be a fraction in (0, 1]"),
        (["--min-memory-ratio", "0"], "min_memory_ratio must be a fraction in (0, 1]"),
        (["--expect", "Z900"], "unknown GPU model 'Z900'"),
    ],
)
def test_bad_options_are_refused_with_the_reason(argv: list[str], message: str) -> None:
    code, out = run(*argv)
    assert code == 2 and message in " ".join(out.split()), out


def test_recording_nvml_without_nvml_says_so() -> None:
    code, out = run("--record-nvml", "/tmp/suanli-verify-no-nvml.json")
    assert code == 1 and "no NVML here to record" in out, out


def test_verify_help_imports_no_torch() -> None:
    """torch is imported when a measurement runs, never at CLI start or for --help."""
    code = "import sys\nfrom suanli.cli import app\ntry:\n    app(['verify', '--help'])\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip().endswith("False"), out
