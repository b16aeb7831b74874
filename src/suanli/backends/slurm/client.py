"""A typed client for the Slurm command-line tools: the only place that runs them.

The Slurm backend talks to Slurm through this class, never through raw subprocess calls,
so every command has one spelling, a timeout, and one error type. Parsing lives in
``parse.py`` (pure); building sbatch jobs in ``sbatch.py`` (pure).

Why the CLI rather than slurmrestd: the CLI is always there where Slurm is, authenticates
through munge with no token plumbing, and 22.05's REST API cannot ask for a batch-shell
signal (``B:USR1@T``), which spot notices need.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suanli.backends.slurm.model import SlurmJob, SlurmNode
from suanli.backends.slurm.parse import (
    parse_sacct,
    parse_sbatch_parsable,
    parse_sinfo,
    parse_squeue,
)
from suanli.backends.slurm.sbatch import SbatchSpec, render_script, sbatch_args

#: ``scontrol update nodename=... state=`` values the backend uses.
NODE_STATES = frozenset({"down", "drain", "resume", "undrain", "idle", "fail"})


class SlurmError(RuntimeError):
    """A Slurm command failed; carries the command line and what Slurm printed."""

    def __init__(self, cmd: Sequence[str], returncode: int | None, stderr: str, stdout: str = "") -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.stderr = stderr.strip()
        self.stdout = stdout.strip()
        how = "timed out" if returncode is None else f"exited {returncode}"
        super().__init__(f"`{' '.join(self.cmd)}` {how}: {self.stderr or self.stdout or '(no output)'}")


#: What a step started by ``step`` (exec into a job) gets of the server's environment.
STEP_ENV = frozenset({"PATH", "LANG", "LC_ALL", "TZ", "SLURM_CONF"})


@dataclass
class SlurmClient:
    """Runs Slurm commands against one cluster.

    ``slurm_conf`` selects the cluster (exported as ``SLURM_CONF`` to the commands; None
    keeps the caller's environment, i.e. the system default). ``bin_dir`` is where the
    tools live when not on PATH.
    """

    slurm_conf: Path | None = None
    bin_dir: Path | None = None
    timeout_s: float = 30.0

    @classmethod
    def from_env(cls) -> SlurmClient:
        """The cluster ``$SLURM_CONF`` points at (as set by ``scripts/slurm-cluster env``)."""
        conf = os.environ.get("SLURM_CONF")
        return cls(slurm_conf=Path(conf) if conf else None)

    # ---- the places that run processes
    def _command(self, args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """The command line (from ``bin_dir`` when set) and environment (``SLURM_CONF``)."""
        cmd = list(args)
        if self.bin_dir is not None:
            cmd[0] = str(self.bin_dir / cmd[0])
        env = dict(os.environ)
        if self.slurm_conf is not None:
            env["SLURM_CONF"] = str(self.slurm_conf)
        return cmd, env

    def run(self, args: Sequence[str], stdin: str | None = None) -> str:
        """Run one Slurm command; return stdout or raise ``SlurmError``."""
        cmd, env = self._command(args)
        try:
            proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(cmd, None, _text(exc.stderr), _text(exc.stdout)) from exc
        except FileNotFoundError as exc:
            raise SlurmError(cmd, 127, f"{cmd[0]}: not found (is Slurm installed?)") from exc
        if proc.returncode != 0:
            raise SlurmError(cmd, proc.returncode, proc.stderr, proc.stdout)
        return proc.stdout

    def _json(self, args: Sequence[str]) -> dict[str, Any]:
        out = self.run(args)
        try:
            return json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmError(args, 0, f"not JSON: {exc}: {out[:200]!r}") from exc

    # ---- inventory and status
    def ping(self) -> bool:
        """True when the controller answers."""
        try:
            self.run(["scontrol", "ping"])
        except SlurmError:
            return False
        return True

    def nodes(self) -> list[SlurmNode]:
        """Every node with its GRES (typed GPUs, shards), CPUs, memory and state."""
        return parse_sinfo(self._json(["sinfo", "--json"]))

    def node(self, name: str) -> SlurmNode:
        for n in self.nodes():
            if n.name == name:
                return n
        raise KeyError(f"no Slurm node {name!r}")

    def jobs(self) -> list[SlurmJob]:
        """Jobs the controller knows (pending, running, and finished within MinJobAge)."""
        return parse_squeue(self._json(["squeue", "--json"]))

    def job(self, job_id: int) -> SlurmJob | None:
        """One job from ``squeue`` (22.05 ignores ``-j`` with ``--json``, so filter here)."""
        return next((j for j in self.jobs() if j.job_id == job_id), None)

    def jobs_by_comment(self, comment: str) -> list[SlurmJob]:
        """Jobs tagged with ``comment`` at submission: how a restarted server finds its own."""
        return [j for j in self.jobs() if j.comment == comment]

    def accounting(self, job_ids: Iterable[int] | None = None, since: str | None = None) -> list[SlurmJob]:
        """``sacct --json`` records (needs slurmdbd), one per run of each job, oldest first.

        ``since`` is any sacct ``--starttime`` value (default: sacct's own, today 00:00).
        """
        args = ["sacct", "--json", "--allusers"]
        ids = [str(i) for i in (job_ids or [])]
        if ids:
            args.append(f"--jobs={','.join(ids)}")
        if since:
            args.append(f"--starttime={since}")
        return parse_sacct(self._json(args))

    # ---- actions
    def submit(self, spec: SbatchSpec) -> int:
        """Submit a pinned batch job; return its Slurm job id."""
        return parse_sbatch_parsable(self.run(sbatch_args(spec), stdin=render_script(spec)))

    def cancel(self, job_id: int) -> None:
        self.run(["scancel", str(job_id)])

    def signal(self, job_id: int, signal: str = "USR1", batch_only: bool = False) -> None:
        """Send ``signal`` to a running job.

        By default the batch shell and its children get it (``--full``), so a plain
        workload sees it even without the Suanli wrapper; ``batch_only`` signals only the
        shell (the wrapper then forwards it).
        """
        self.run(["scancel", f"--signal={signal}", "--batch" if batch_only else "--full", str(job_id)])

    def step(self, job_id: int, node: str, argv: Sequence[str], workdir: str, timeout_s: float) -> tuple[int, str]:
        """Run ``argv`` as a step inside running job ``job_id`` on ``node``, sharing the
        job's resources (``--overlap``); return its exit code (124 on timeout) and output.
        A non-zero exit is the command's answer, not an error."""
        cmd, env = self._command(
            [
                "srun",
                f"--jobid={job_id}",
                "--overlap",
                f"--nodelist={node}",
                "--nodes=1",
                "--ntasks=1",
                f"--chdir={workdir}",
                "--quiet",
                *argv,
            ]
        )
        # srun hands its own environment to the step: only what finds programs and the
        # cluster, never the server's (database URLs, tokens)
        env = {k: v for k, v in env.items() if k in STEP_ENV}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            return 124, _text(exc.stdout) + _text(exc.stderr) + f"\n[suanli] timed out after {timeout_s}s\n"
        except FileNotFoundError as exc:
            raise SlurmError(cmd, 127, f"{cmd[0]}: not found (is Slurm installed?)") from exc
        return proc.returncode, proc.stdout + proc.stderr

    def requeue(self, job_id: int, hold: bool = False) -> None:
        """Stop the job and put it back in the queue under the same id (restart count + 1)."""
        self.run(["scontrol", "requeuehold" if hold else "requeue", str(job_id)])

    def release(self, job_id: int) -> None:
        self.run(["scontrol", "release", str(job_id)])

    def update_pending(self, job_id: int, *, node: str | None = None, gres: str | None = None, start_now: bool = False) -> None:
        """Re-pin a pending (e.g. requeued) job, and let it start without waiting.

        A requeued job waits ``cred_expire + 1`` s (BeginTime) before it may run again;
        ``start_now`` clears that, which is what makes failover to *another* node fast.
        Do not use it to restart on the node the job just left: that slurmd still holds the
        revoked credential and fails the job ("Job credential revoked").
        """
        args = ["scontrol", "update", f"jobid={job_id}"]
        if node:
            args.append(f"nodelist={node}")
        if gres:
            args.append(f"gres={gres}")
        if start_now:
            args.append("starttime=now")
        if len(args) == 3:
            raise ValueError("nothing to update")
        self.run(args)

    def set_node_state(self, node: str, state: str, reason: str | None = None) -> None:
        """``scontrol update nodename=NODE state=STATE``; down and drain need a reason."""
        if state not in NODE_STATES:
            raise ValueError(f"node state must be one of {sorted(NODE_STATES)}, got {state!r}")
        args = ["scontrol", "update", f"nodename={node}", f"state={state}"]
        if state in ("down", "drain", "fail"):
            args.append(f"reason={reason or 'suanli'}")
        self.run(args)


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
