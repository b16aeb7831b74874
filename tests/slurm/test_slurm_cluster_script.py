"""scripts/slurm-cluster's generated configuration (no daemons: `config` only writes files)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-cluster"


def cluster(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_ROOT": str(tmp_path / "root"), **env},
    )


def test_config_lays_out_typed_nodes_and_shards(tmp_path: Path) -> None:
    cluster(tmp_path, "config", NODE_GPUS="h100:2 a100:1", SHARDS_PER_GPU="4")
    etc = tmp_path / "root" / "etc"
    conf = (etc / "slurm.conf").read_text()
    assert "NodeName=node1 " in conf and "Port=17001" in conf and "Gres=gpu:h100:2,shard:8" in conf
    assert "NodeName=node2 " in conf and "Port=17002" in conf and "Gres=gpu:a100:1,shard:4" in conf
    assert "NodeName=node3" not in conf
    assert "GresTypes=gpu,shard" in conf
    assert "PreemptType=preempt/qos" in conf  # WITH_DBD=1 is the default
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/gpu:a100,gres/shard" in conf
    gres = (etc / "gres.conf").read_text().splitlines()
    dev = tmp_path / "root" / "dev"
    assert f"NodeName=node1 Name=gpu Type=h100 File={dev}/node1/nvidia[0-1]" in gres
    assert f"NodeName=node1 Name=shard Count=4 File={dev}/node1/nvidia1" in gres
    assert f"NodeName=node2 Name=gpu Type=a100 File={dev}/node2/nvidia0" in gres
    # slurmd refuses plain files: the devices are char devices or links to /dev/null
    device = dev / "node1" / "nvidia1"
    assert device.is_char_device() or os.readlink(device) == "/dev/null"
    assert (etc / "slurmdbd.conf").stat().st_mode & 0o077 == 0


def test_config_without_accounting_falls_back_to_partition_preemption(tmp_path: Path) -> None:
    cluster(tmp_path, "config", WITH_DBD="0", SHARDS_PER_GPU="0", NODE_GPUS="h100:1")
    conf = (tmp_path / "root" / "etc" / "slurm.conf").read_text()
    assert "AccountingStorageType=accounting_storage/none" in conf and "AccountingStorageTRES" not in conf
    assert "PreemptType=preempt/partition_prio" in conf and "GresTypes=gpu\n" in conf
    assert not (tmp_path / "root" / "etc" / "slurmdbd.conf").exists()


def test_env_names_the_config(tmp_path: Path) -> None:
    out = cluster(tmp_path, "env").stdout
    assert f"export SLURM_CONF={tmp_path}/root/etc/slurm.conf" in out
    assert f"export SUANLI_SLURM_ROOT={tmp_path}/root" in out


def test_run_without_a_cluster_passes_the_reason_to_the_tests(tmp_path: Path) -> None:
    out = cluster(tmp_path, "run", "--", "bash", "-c", 'echo "skip=$SUANLI_SLURM_SKIP"', SUANLI_SLURM="off")
    assert out.stdout.strip() == "skip=SUANLI_SLURM=off"


def test_restart_slurmd_refuses_unknown_nodes_and_a_stopped_cluster(tmp_path: Path) -> None:
    cluster(tmp_path, "config", NODE_GPUS="h100:1")

    def restart(node: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), "restart-slurmd", node],
            capture_output=True,
            text=True,
            env={**os.environ, "SLURM_ROOT": str(tmp_path / "root")},
            check=False,
        )

    bad = restart("x; rm -rf /")
    assert bad.returncode != 0 and "usage" in bad.stderr
    assert "no node2 in" in restart("node2").stderr
    assert "slurmctld is not running" in restart("node1").stderr  # nothing started: nothing to restart into
    conf = (tmp_path / "root" / "etc" / "slurm.conf").read_text()
    assert "SlurmdTimeout=10\n" in conf  # a dead slurmd: NOT_RESPONDING after ~SlurmdTimeout/3 + MessageTimeout
