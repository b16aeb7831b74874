"""How the client runs commands and reports failures (no daemons: stand-in executables).

The stand-ins only check the client's own plumbing (which command, which SLURM_CONF, what
error); everything Slurm itself does is tested against real daemons in
test_slurm_cluster.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suanli.backends.slurm.client import SlurmClient, SlurmError
from suanli.backends.slurm.sbatch import SbatchSpec

DATA = Path(__file__).parent / "data"


def tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d


def test_failure_carries_command_exit_code_and_stderr(bin_dir: Path) -> None:
    tool(bin_dir, "scontrol", 'echo "Invalid job id specified" >&2; exit 1')
    client = SlurmClient(bin_dir=bin_dir)
    with pytest.raises(SlurmError) as err:
        client.requeue(12)
    assert err.value.cmd == [str(bin_dir / "scontrol"), "requeue", "12"]
    assert err.value.returncode == 1 and err.value.stderr == "Invalid job id specified"
    assert "requeue 12` exited 1: Invalid job id specified" in str(err.value)


def test_missing_tool_and_timeout_are_slurm_errors(bin_dir: Path) -> None:
    with pytest.raises(SlurmError, match="not found"):
        SlurmClient(bin_dir=bin_dir).nodes()
    tool(bin_dir, "sinfo", "sleep 5")
    with pytest.raises(SlurmError, match="timed out"):
        SlurmClient(bin_dir=bin_dir, timeout_s=0.3).nodes()


def test_commands_see_the_chosen_slurm_conf_and_parse_json(bin_dir: Path, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    tool(bin_dir, "sinfo", f'echo "$SLURM_CONF $*" > {seen}; cat {DATA / "sinfo-shards-in-use.json"}')
    nodes = SlurmClient(slurm_conf=Path("/etc/x/slurm.conf"), bin_dir=bin_dir).nodes()
    assert seen.read_text().strip() == "/etc/x/slurm.conf --json"
    assert [n.name for n in nodes] == ["node1", "node2", "node3", "node4"]


def test_non_json_output_is_a_slurm_error(bin_dir: Path) -> None:
    tool(bin_dir, "squeue", "echo 'squeue: error: something'")
    with pytest.raises(SlurmError, match="not JSON"):
        SlurmClient(bin_dir=bin_dir).jobs()


def test_submit_sends_the_script_on_stdin(bin_dir: Path, tmp_path: Path) -> None:
    got = tmp_path / "script"
    tool(bin_dir, "sbatch", f'cat > {got}; echo "$*" > {tmp_path / "args"}; echo "77;suanli"')
    spec = SbatchSpec(name="j", command="echo hi", node="node2", gpu_count=1)
    assert SlurmClient(bin_dir=bin_dir).submit(spec) == 77
    assert got.read_text().startswith("#!/bin/bash")
    assert "--nodelist=node2" in (tmp_path / "args").read_text()


def test_update_and_node_state_arguments_are_checked(bin_dir: Path) -> None:
    client = SlurmClient(bin_dir=bin_dir)
    with pytest.raises(ValueError):
        client.update_pending(1)
    with pytest.raises(ValueError):
        client.set_node_state("node1", "sideways")
