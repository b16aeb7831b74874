"""The Slurm backend's container mode on the real daemons and real Podman: a task with an
image runs in the container on the node Slurm allocated (BusyBox, not this Debian host),
with the GPUs Slurm gave (virtual here: ``CUDA_VISIBLE_DEVICES``), its exit code as the
job's, the spot notice (USR1, deadline readable inside, then TERM) reaching the workload
inside, exec inside (``podman exec`` as a step), and no container left after a cancel,
even when Slurm has to KILL the batch shell.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.backends.base import Handle, TaskSpec, TaskState
from suanli.backends.local import firewall, imagebuild
from suanli.backends.local.engine import detect
from suanli.backends.slurm import SlurmBackend, SlurmClient
from suanli.backends.slurm.sbatch import SbatchSpec, render_script
from tests.slurm.slurm_helpers import nodes_with_gpu, wait_until

TINY = imagebuild.recipe("tiny").ref


@pytest.fixture(scope="module")
def tiny() -> str:
    if detect("podman") is None:
        why = "no Podman answers on this machine (scripts/images installs it)"
        if os.environ.get("SUANLI_CONTAINERS") == "require":
            pytest.fail(f"SUANLI_CONTAINERS=require: {why}")
        pytest.skip(why)
    imagebuild.pull_or_build("tiny", "podman")
    return TINY


def containers(label: str) -> list[str]:
    """Names of every container (running or not) carrying ``label``."""
    out = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"], capture_output=True, text=True, check=True
    ).stdout
    return out.split()


@pytest.fixture
def backend(slurm: SlurmClient, tiny: str, tmp_path: Path) -> Iterator[SlurmBackend]:
    tmp_path.chmod(0o777)
    b = SlurmBackend(
        slurm,
        tmp_path / "slurm",
        tag_prefix=f"c{time.time_ns()}",
        notice_s=5,
        runtime="container",
        gpu_access="virtual",
        pull="never",
    )
    yield b
    for h in b.list_running():
        b.stop(h, grace_s=0)
    wait_until(lambda: not b.list_running(), 30, "container test jobs to end")
    wait_until(lambda: not containers(f"suanli.tag={b.tag_prefix}"), 10, "no container left")
    engine = detect("podman")
    assert engine is not None
    for net in subprocess.run(
        ["podman", "network", "ls", "--filter", f"label=suanli.tag={b.tag_prefix}", "--format", "{{.Name}}"],
        capture_output=True,
        text=True,
    ).stdout.split():
        engine.remove_network(net, firewall.unguard)  # under the host lock: a reused bridge name keeps its rules


def spec(key: str, node: str, run: str, gpus: tuple[int, ...] = (), image: str = TINY) -> TaskSpec:
    return TaskSpec(
        key=key,
        kind="job",
        workload_id=1,
        node=node,
        node_rank=0,
        run=run,
        image=image,
        env={"CUDA_VISIBLE_DEVICES": "99", "SUANLI_JOB_ID": "1", "SUANLI_GPU_INDICES": "99"},
        gpu_indices=gpus,
        milli_per_gpu=1000 if gpus else 0,
        cpu_milli=1000,
        memory_mib=256,
    )


def ended(backend: SlurmBackend, h: Handle, timeout_s: float = 30) -> int | None:
    st = wait_until(lambda: (s := backend.status(h)).state == TaskState.EXITED and s, timeout_s, f"{h.key} ended")
    return st.exit_code


@pytest.mark.slurm
def test_a_job_with_an_image_runs_in_the_container_with_its_gpus_and_exit_code(slurm: SlurmClient, backend: SlurmBackend) -> None:
    node = nodes_with_gpu(slurm, "a100")[-1].name
    run = (
        'test ! -e /etc/debian_version && echo "busybox inside"; '
        'echo "cvd=$CUDA_VISIBLE_DEVICES idx=$SUANLI_GPU_INDICES job=$SUANLI_JOB_ID pwd=$(pwd) '
        'deadline_file=$SUANLI_PREEMPT_DEADLINE_FILE runtime=$SUANLI_RUNTIME"; '
        "echo kept > /workspace/out.txt; exit 7"
    )
    h = backend.submit(spec("job-1-0", node, run, gpus=(0, 1)))
    assert h.data["runtime"] == "container" and h.data["gpu_access"] == "virtual"
    assert h.data["container"] == f"{backend.containers.prefix}-job-1-0"
    assert ended(backend, h) == 7  # the workload's exit code is the job's
    text = backend.logs(h)
    assert "busybox inside" in text, text
    line = next(x for x in text.splitlines() if x.startswith("cvd="))
    cvd = line.split()[0].removeprefix("cvd=")
    assert len(cvd.split(",")) == 2 and cvd != "99", line  # Slurm's indices, never the caller's 99
    assert (f"idx={cvd} job=1 pwd=/workspace deadline_file=/run/suanli/preempt_deadline runtime=container") in line
    assert (Path(h.data["volume"]) / "out.txt").read_text() == "kept\n"  # the volume, on shared storage
    assert not containers(f"suanli.tag={backend.tag_prefix}")  # --rm
    # no image: the workload is a process of the job, as before
    plain = backend.submit(spec("job-2-0", node, "test -e /etc/debian_version", image=""))
    assert plain.data["runtime"] == "process" and "container" not in plain.data
    assert ended(backend, plain) == 0


@pytest.mark.slurm
def test_notice_then_term_reach_the_workload_inside_and_exec_runs_there(slurm: SlurmClient, backend: SlurmBackend) -> None:
    node = nodes_with_gpu(slurm, "h100")[-1].name
    run = (
        'trap \'echo "usr1 deadline=$(cat "$SUANLI_PREEMPT_DEADLINE_FILE")"\' USR1\n'
        "trap 'echo term; exit 3' TERM\n"
        "echo up\n"
        "while :; do sleep 1 & wait $!; done"
    )
    h = backend.submit(spec("instance-5", node, run, gpus=(0,)))
    wait_until(lambda: "up" in backend.logs(h).split(), 30, "container up")
    _, indices = wait_until(lambda: backend.placement(h), 10, "placement")
    done = backend.exec(
        h,
        'test ! -e /etc/debian_version && echo "inside cvd=$CUDA_VISIBLE_DEVICES pwd=$PWD '
        'job=$SUANLI_JOB_ID host=$(hostname)"; exit 4',
    )
    assert done.exit_code == 4, done.output
    assert f"inside cvd={indices[0]} pwd=/workspace job=1 host=instance-5" in done.output
    # a fresh backend (a restarted server) finds the job and still execs in its container
    fresh = SlurmBackend(SlurmClient(slurm_conf=slurm.slurm_conf), backend.root, tag_prefix=backend.tag_prefix)
    (found,) = fresh.list_running()
    assert found.data["runtime"] == "container" and found.data["job_id"] == h.data["job_id"]
    assert fresh.exec(found, "cat /proc/1/comm").output.strip() in ("catatonit", "podman-init")  # --init
    deadline = int(time.time()) + backend.notice_s
    backend.notice(h, deadline)
    got = wait_until(
        lambda: next((x for x in backend.logs(h).splitlines() if x.startswith("usr1 deadline=")), None), 15, "notice inside"
    )
    assert abs(int(got.split("=")[1]) - deadline) <= 2
    assert abs(int(backend.exec(h, "echo $SUANLI_PREEMPT_DEADLINE").output.strip()) - deadline) <= 2
    assert backend.status(h).state == TaskState.RUNNING  # the workload chose to keep running
    backend.signal(h, signal.SIGTERM)
    assert ended(backend, h) == 3
    lines = backend.logs(h).splitlines()
    assert lines.index("term") > lines.index(got)
    assert not containers(f"suanli.tag={backend.tag_prefix}")


@pytest.mark.slurm
def test_cancel_leaves_no_container_even_when_slurm_must_kill_the_batch_shell(slurm: SlurmClient, backend: SlurmBackend) -> None:
    node = nodes_with_gpu(slurm, "a100")[0].name
    stubborn = "trap '' TERM\necho up\nwhile :; do sleep 1; done"  # ignores TERM: Slurm KILLs after KillWait
    h = backend.submit(spec("job-3-0", node, stubborn))
    wait_until(lambda: "up" in backend.logs(h).split(), 30, "container up")
    assert containers(f"suanli.tag={backend.tag_prefix}") == [h.data["container"]]
    t0 = time.monotonic()
    backend.stop(h, grace_s=0)  # scancel: TERM to everything, KILL after KillWait
    wait_until(lambda: backend.status(h).state == TaskState.EXITED, 40, "job ended")
    wait_until(lambda: not containers(f"suanli.tag={backend.tag_prefix}"), 15, "the container removed")
    assert time.monotonic() - t0 < 30
    wait_until(lambda: not list(Path("/tmp").glob(f"suanli-{h.data['job_id']}.*.cid")), 5, "the guard done")


def test_container_script_keeps_signals_until_the_container_runs(tmp_path: Path) -> None:
    """The wrapper in container mode, without daemons: a USR1 sent while the engine is
    still starting is held, then delivered through ``ENGINE kill``; the exit status is the
    engine's. A fake engine (a shell script) records what it is asked."""
    log = tmp_path / "engine.log"
    fake = tmp_path / "fake-engine"
    fake.write_text(f"""#!/bin/bash
echo "$*" >> {log}
case "$1" in
  inspect) [ -e {tmp_path}/started ] && echo running || echo created ;;
  kill) echo "$3" >> {tmp_path}/signals ;;
  run) echo cid123 > "$SUANLI_CIDFILE"; sleep 1; touch {tmp_path}/started
       while [ "$(wc -l < {tmp_path}/signals 2>/dev/null || echo 0)" -lt 2 ]; do sleep 0.05; done; exit 9 ;;
esac
""")
    fake.chmod(0o755)
    sb = SbatchSpec(
        name="c",
        command=f"exec {fake} run",
        node="node1",
        engine=str(fake),
        notice_s=30,
        env={"SUANLI_PREEMPT_DEADLINE_FILE": str(tmp_path / "deadline")},
    )
    (tmp_path / "job.sh").write_text(render_script(sb))
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": f"t{os.getpid()}"}
    proc = subprocess.Popen(["bash", str(tmp_path / "job.sh")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        proc.send_signal(signal.SIGUSR1)  # before the container runs
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 9
    finally:
        proc.kill()
    assert (tmp_path / "signals").read_text().split() == ["USR1", "TERM"]
    assert int((tmp_path / "deadline").read_text()) >= int(time.time()) + 25
    calls = log.read_text()
    assert "kill --signal USR1 cid123" in calls and " rm " not in calls  # nothing left to remove
