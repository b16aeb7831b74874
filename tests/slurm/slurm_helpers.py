"""Helpers for the tests against real Slurm daemons: polling with deadlines, job tracking."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from suanli.backends.slurm import SbatchSpec, SlurmClient, SlurmError, SlurmJob, SlurmNode

T = TypeVar("T")


def wait_until(probe: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.1) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def cluster_root(client: SlurmClient) -> Path:
    """Where scripts/slurm-cluster keeps the cluster's state (configs, logs, PID files)."""
    assert client.slurm_conf is not None
    return Path(os.environ.get("SUANLI_SLURM_ROOT") or Path(client.slurm_conf).parent.parent)


class Jobs:
    """Submits jobs for one test and cancels whatever is left at the end."""

    def __init__(self, client: SlurmClient, out_dir: Path) -> None:
        self.client = client
        self.out_dir = out_dir
        self.ids: list[int] = []

    def submit(self, **fields: object) -> int:
        fields.setdefault("output", str(self.out_dir / "%x-%j.out"))
        fields.setdefault("workdir", str(self.out_dir))
        job_id = self.client.submit(SbatchSpec(**fields))  # type: ignore[arg-type]
        self.ids.append(job_id)
        return job_id

    def state(self, job_id: int, *states: str) -> SlurmJob | None:
        """The job when it is in one of ``states``, else None."""
        job = self.client.job(job_id)
        return job if job is not None and job.state in states else None

    def wait_state(self, job_id: int, *states: str, timeout_s: float = 20) -> SlurmJob:
        return wait_until(lambda: self.state(job_id, *states), timeout_s, f"job {job_id} in {states}")

    def wait_text(self, path: Path, text: str, timeout_s: float = 20, job_id: int | None = None) -> str:
        """Wait for ``text`` in the file; on timeout, show what the file did say, and with
        ``job_id`` what Slurm says of the job (``story``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            content = path.read_text() if path.exists() else ""
            if text in content:
                return content
            if time.monotonic() > deadline:
                story = "" if job_id is None else "\n" + self.story(job_id)
                pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {text!r} in {path}; it holds {content!r}{story}")
            time.sleep(0.1)

    def story(self, job_id: int) -> str:
        """What Slurm recorded of a job, for a failure message: each step's state and exit
        code (an exit by signal shows as ``0:N``), and the daemons' log lines naming it."""
        try:
            steps = self.client.run(["sacct", "-D", "-P", "-j", str(job_id), "--format=JobID,State,ExitCode,Start,End"])
        except SlurmError as exc:
            steps = f"sacct failed: {exc}"
        named = re.compile(rf"(JobId=|job[ _]?|StepId=){job_id}\b", re.IGNORECASE)
        lines = [
            f"{log.name}: {line}"
            for log in sorted((cluster_root(self.client) / "log").glob("*.log"))
            for line in log.read_text(errors="replace").splitlines()
            if named.search(line)
        ]
        return f"sacct of job {job_id}:\n{steps}\nlog lines naming it:\n" + "\n".join(lines[-60:])

    def output(self, name: str, job_id: int) -> Path:
        return self.out_dir / f"{name}-{job_id}.out"

    def cancel_all(self) -> None:
        for job_id in self.ids:
            try:
                self.client.cancel(job_id)
            except SlurmError:
                pass
        wait_until(
            lambda: not any(j.job_id in self.ids and j.state in ("RUNNING", "COMPLETING") for j in self.client.jobs()),
            30,
            "test jobs to end",
        )


def nodes_with_gpu(client: SlurmClient, gpu_type: str) -> list[SlurmNode]:
    """Nodes that are up and have ``gpu_type`` GPUs, by name."""
    return [n for n in client.nodes() if n.health == "up" and gpu_type in n.gpus()]
