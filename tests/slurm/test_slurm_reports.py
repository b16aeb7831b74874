"""What the Slurm backend reports to the control plane (node health, GPU placements),
from JSON captured on the real Slurm 22.05.8 test cluster: pure, no cluster needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suanli.backends.base import (
    BackendError,
    Handle,
    NodeHealth,
    NodeReport,
    Placement,
    ReportsNodeHealth,
    ReportsPlacements,
    SupportsNotice,
)
from suanli.backends.slurm import SlurmBackend, SlurmError
from suanli.backends.slurm.parse import parse_sinfo, parse_squeue
from suanli.backends.slurm.reports import job_placement, node_report

DATA = Path(__file__).parent / "data"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


class CapturedClient:
    """Answers ``sinfo``/``squeue`` with captured output, or fails like a dead controller."""

    def __init__(self, sinfo: str, squeue: str, fail: bool = False) -> None:
        self.sinfo, self.squeue, self.fail = sinfo, squeue, fail

    def nodes(self):  # type: ignore[no-untyped-def]
        if self.fail:
            raise SlurmError(["sinfo", "--json"], 1, "slurm_load_node error: Unable to contact slurm controller")
        return parse_sinfo(load(self.sinfo))

    def jobs(self):  # type: ignore[no-untyped-def]
        if self.fail:
            raise SlurmError(["squeue", "--json"], 1, "slurm_load_jobs error: Unable to contact slurm controller")
        return parse_squeue(load(self.squeue))


def backend(tmp_path: Path, **kw: object) -> SlurmBackend:
    client = CapturedClient("sinfo-not-responding.json", "squeue-gpu-and-shards.json", **kw)  # type: ignore[arg-type]
    return SlurmBackend(client, tmp_path, runtime="process", gpu_access="virtual")  # type: ignore[arg-type]


def test_node_reports_name_why_a_node_is_down() -> None:
    nodes = {n.name: node_report(n) for n in parse_sinfo(load("sinfo-not-responding.json"))}
    assert nodes["node1"] == NodeReport("node1", NodeHealth.DOWN, "NOT_RESPONDING")
    assert nodes["node2"] == NodeReport("node2", NodeHealth.DOWN, "DOWN, NOT_RESPONDING: Not responding")
    assert nodes["node3"].health == NodeHealth.UP
    drained = {n.name: node_report(n) for n in parse_sinfo(load("sinfo-down-drain.json"))}
    assert drained["node3"].health == NodeHealth.DRAINING
    assert drained["node4"] == NodeReport("node4", NodeHealth.DOWN, "DOWN: suanli test")


def test_a_placement_is_where_a_running_job_s_gpus_are() -> None:
    jobs = {j.job_id: j for j in parse_squeue(load("squeue-gpu-and-shards.json"))}
    assert job_placement("job-7-0", jobs[3]) == Placement("job-7-0", "node3", (0, 1))
    assert job_placement("job-8-0", jobs[1]) == Placement("job-8-0", "node1", (0,))  # shards sit on GPU 0
    assert job_placement("job-9-0", None) is None
    requeued = {j.job_id: j for j in parse_squeue(load("squeue-finished-and-requeued.json"))}[8]
    assert requeued.state == "PENDING" and job_placement("job-10-0", requeued) is None


def test_the_backend_declares_and_answers_its_capabilities(tmp_path: Path) -> None:
    b = backend(tmp_path)
    assert isinstance(b, ReportsNodeHealth) and isinstance(b, ReportsPlacements) and isinstance(b, SupportsNotice)
    assert [(r.name, r.health) for r in b.node_health()] == [
        ("node1", NodeHealth.DOWN),
        ("node2", NodeHealth.DOWN),
        ("node3", NodeHealth.UP),
        ("node4", NodeHealth.UP),
    ]
    handles = [Handle("slurm", "job-7-0", {"job_id": 3}), Handle("slurm", "job-9-0", {"job_id": 999}), Handle("slurm", "x", {})]
    assert b.placements(handles) == [Placement("job-7-0", "node3", (0, 1))]
    assert b.placement(handles[0]) == ("node3", (0, 1))


def test_a_controller_that_does_not_answer_is_a_backend_error(tmp_path: Path) -> None:
    b = backend(tmp_path, fail=True)
    with pytest.raises(BackendError, match="node states"):
        b.node_health()
    with pytest.raises(BackendError, match="jobs"):
        b.placements([Handle("slurm", "job-7-0", {"job_id": 3})])


def test_a_notice_without_the_signal_writes_only_the_deadline(tmp_path: Path) -> None:
    b = backend(tmp_path)
    h = Handle("slurm", "instance-4", {"job_id": 3, "dir": str(tmp_path / "instance-4")})
    (tmp_path / "instance-4").mkdir()
    b.notice(h, 1234.9, send_signal=False)  # no signal: nothing is asked of Slurm
    assert (tmp_path / "instance-4" / "preempt_deadline").read_text() == "1234\n"
