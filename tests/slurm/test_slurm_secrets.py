"""The Slurm backend keeps a task's secrets out of every file of its own (``env.json``,
``env.sh``): they go only into the batch script, which reaches sbatch on standard input
(Slurm keeps it in its own spool), and a container takes them from the script by name.
A stub client records what would be submitted; no cluster is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from suanli.backends.base import TaskSpec
from suanli.backends.slurm import SlurmBackend
from suanli.backends.slurm.model import SlurmNode
from suanli.backends.slurm.sbatch import SbatchSpec, render_script

VALUE = "slurm-secret-B5n6M7"


class StubClient:
    def __init__(self) -> None:
        self.submitted: list[SbatchSpec] = []

    def nodes(self) -> list[SlurmNode]:
        return [SlurmNode("n1", "idle", (), "", 8, 0, 16384, 0, (), ("debug",))]

    def jobs(self) -> list:
        return []

    def submit(self, spec: SbatchSpec) -> int:
        self.submitted.append(spec)
        return 42


@pytest.mark.parametrize("runtime", ["process", "container"])
def test_secrets_only_in_the_batch_script(tmp_path: Path, runtime: str) -> None:
    client = StubClient()
    backend = SlurmBackend(client, tmp_path / "slurm", runtime=runtime, tag_prefix="sec", gpu_access="virtual")  # type: ignore[arg-type]
    spec = TaskSpec(
        key="job-1-0",
        kind="job",
        workload_id=1,
        node="n1",
        node_rank=0,
        run='printf %s "$HF_TOKEN" | sha256sum',
        env={"EPOCHS": "1", "SUANLI_SECRET_NAMES": "HF_TOKEN"},
        image="localhost/suanli/tiny:1" if runtime == "container" else "",
        secrets={"HF_TOKEN": VALUE},
    )
    assert VALUE not in repr(spec)
    backend.submit(spec)
    (sb,) = client.submitted
    script = render_script(sb)
    assert f"export HF_TOKEN={VALUE}" in script  # the workload's environment, via sbatch's stdin
    files = {p.name: p.read_text() for p in (tmp_path / "slurm").rglob("*") if p.is_file()}
    assert "env.json" in files and not [n for n, text in files.items() if VALUE in text], sorted(files)
    if runtime == "container":
        assert "envs+=(-e HF_TOKEN)" in sb.command and VALUE not in sb.command
