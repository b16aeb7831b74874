"""The sbatch command line and batch script built for a pinned allocation (pure, no daemons)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from suanli.backends.slurm.sbatch import (
    SbatchSpec,
    SbatchSpecError,
    format_duration,
    render_script,
    sbatch_args,
    shards_for_milli,
)


def test_whole_gpus_are_pinned_to_the_chosen_node() -> None:
    spec = SbatchSpec(
        name="train",
        command="python train.py",
        node="node3",
        gpu_type="a100",
        gpu_count=2,
        cpus=8,
        memory_mb=32768,
        output="/logs/%j.out",
        workdir="/work",
        comment="suanli:alloc=7",
    )
    assert sbatch_args(spec) == [
        "sbatch",
        "--parsable",
        "--job-name=train",
        "--nodelist=node3",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=8",
        "--export=NONE",
        "--gres=gpu:a100:2",
        "--mem=32768M",
        "--no-requeue",
        "--output=/logs/%j.out",
        "--open-mode=append",
        "--chdir=/work",
        "--comment=suanli:alloc=7",
    ]


def test_spot_job_asks_for_requeue_qos_and_a_usr1_notice() -> None:
    spec = SbatchSpec(
        name="spot",
        command="x",
        node="node1",
        gpu_type="h100",
        gpu_count=1,
        qos="spot",
        requeue=True,
        notice_s=300,
        time_limit_s=90061,
    )
    args = sbatch_args(spec)
    assert {"--qos=spot", "--requeue", "--signal=B:USR1@300", "--time=1-01:01:01"} <= set(args)
    assert "--no-requeue" not in args


def test_fractional_request_becomes_shards_of_one_gpu() -> None:
    spec = SbatchSpec(name="infer", command="x", node="node1", gpu_type="h100", shards=shards_for_milli(500, 10))
    assert spec.gres == "shard:h100:5"
    assert "--gres=shard:h100:5" in sbatch_args(spec)
    assert SbatchSpec(name="cpu", command="x", node="node1").gres is None


@pytest.mark.parametrize(
    ("milli", "per_gpu", "shards"), [(500, 10, 5), (250, 10, 3), (1, 10, 1), (999, 10, 10), (250, 4, 1), (300, 4, 2)]
)
def test_shards_round_up_so_tenants_never_get_less(milli: int, per_gpu: int, shards: int) -> None:
    assert shards_for_milli(milli, per_gpu) == shards


@pytest.mark.parametrize(("milli", "per_gpu"), [(0, 10), (1000, 10), (500, 0)])
def test_shards_refuse_what_is_not_a_fraction_of_a_sharing_gpu(milli: int, per_gpu: int) -> None:
    with pytest.raises(SbatchSpecError):
        shards_for_milli(milli, per_gpu)


@pytest.mark.parametrize(
    "fields",
    [
        {"node": "node[1-2]"},
        {"node": "node1,node2"},
        {"node": ""},
        {"name": "two words"},
        {"gpu_count": 1, "shards": 2},
        {"gpu_count": -1},
        {"cpus": 0},
        {"notice_s": -5},
        {"env": {"CUDA_VISIBLE_DEVICES": "0"}},
        {"env": {"BAD-NAME": "x"}},
    ],
)
def test_invalid_specs_are_refused(fields: dict) -> None:
    base = {"name": "job", "command": "true", "node": "node1"}
    with pytest.raises(SbatchSpecError):
        SbatchSpec(**{**base, **fields})


def test_format_duration() -> None:
    assert format_duration(59) == "0-00:00:59"
    assert format_duration(86400 + 3600 * 2 + 61) == "1-02:01:01"


def test_script_exports_quoted_env_and_wraps_the_command() -> None:
    spec = SbatchSpec(
        name="j",
        command="echo 'hi there'",
        node="node1",
        notice_s=300,
        env={"SUANLI_CHECKPOINT_DIR": "/ckpt/a b", "SUANLI_RESUME_FROM": "it's"},
    )
    script = render_script(spec)
    assert script.startswith("#!/bin/bash\n")
    assert "export SUANLI_CHECKPOINT_DIR='/ckpt/a b'" in script
    assert "export SUANLI_RESUME_FROM='it'\"'\"'s'" in script
    assert "export SUANLI_NOTICE_S=300" in script
    assert "export PATH=" in script
    assert "/bin/bash -c 'echo '\"'\"'hi there'\"'\"'' &" in script


def run_script(spec: SbatchSpec, tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    path = tmp_path / "job.sh"
    path.write_text(render_script(spec))
    return subprocess.Popen(
        ["bash", str(path)], env={**env, "SLURM_RESTART_COUNT": "2"}, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_wrapper_forwards_usr1_records_the_deadline_and_keeps_the_exit_code(tmp_path: Path) -> None:
    """Run the generated script with plain bash, as slurmstepd would, and send it the notice."""
    log, deadline_file = tmp_path / "log", tmp_path / "deadline"
    command = (
        f"trap 'echo USR1 >> {log}; exit 7' USR1; echo start $SUANLI_RESTART_COUNT >> {log}; while true; do sleep 0.05; done"
    )
    spec = SbatchSpec(
        name="w", command=command, node="node1", notice_s=120, env={"SUANLI_PREEMPT_DEADLINE_FILE": str(deadline_file)}
    )
    proc = run_script(spec, tmp_path, dict(os.environ))
    try:
        _wait(lambda: log.exists() and "start 2" in log.read_text())
        sent = int(time.time())
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=10) == 7
    finally:
        proc.kill()
    assert log.read_text().splitlines() == ["start 2", "USR1"]
    assert sent + 119 <= int(deadline_file.read_text()) <= int(time.time()) + 121


def test_wrapper_forwards_term(tmp_path: Path) -> None:
    log = tmp_path / "log"
    command = f"trap 'echo TERM >> {log}; exit 0' TERM; echo up >> {log}; while true; do sleep 0.05; done"
    proc = run_script(SbatchSpec(name="t", command=command, node="node1"), tmp_path, dict(os.environ))
    try:
        _wait(lambda: log.exists())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    assert log.read_text().splitlines() == ["up", "TERM"]


def _wait(probe, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_job_with_a_notice_period_hears_usr1_before_term(tmp_path: Path) -> None:
    """Slurm's preemption with GraceTime=0 sends TERM with (or before) USR1: the notice still comes first."""
    log = tmp_path / "log"
    command = (
        f"trap 'echo USR1 >> {log}' USR1; trap 'echo TERM >> {log}; exit 0' TERM; echo up >> {log}; "
        "while true; do sleep 0.05; done"
    )
    proc = run_script(SbatchSpec(name="n", command=command, node="node1", notice_s=60), tmp_path, dict(os.environ))
    try:
        _wait(lambda: log.exists())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    assert log.read_text().splitlines() == ["up", "USR1", "TERM"]
