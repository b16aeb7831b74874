"""Instances and jobs as real containers: image, limits, /workspace across stop/start,
exec, logs, quotas, the spot notice inside the container, distributed nodes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from suanli.backends.local import LocalBackend
from suanli.inventory import Inventory, NodeDecl
from tests.containers.container_helpers import make_server
from tests.control.control_helpers import Server, wait_state, wait_until


def create(srv: Server, token: str | None = None, **body: object) -> dict:
    body = {"gpu_model": "h100", "gpu_count": 1, "image": "tiny", "disk_gib": 1, **body}
    r = srv.post("/v1/instances", body, token=token)
    assert r.status_code == 201, r.text
    return wait_state(srv, "instance", r.json()["id"], ("running", "failed"), 60)


def run(srv: Server, inst: dict, command: str, token: str | None = None) -> tuple[int, str]:
    r = srv.http.post(
        f"/v1/instances/{inst['id']}/exec",
        json={"command": command, "timeout_s": 30},
        headers={"Authorization": f"Bearer {token or srv.token}"},
    )
    assert r.status_code == 200, r.text
    return r.json()["exit_code"], r.json()["output"]


def containers_of(srv: Server) -> dict:
    local = srv.ctx.backends["local"]
    assert isinstance(local, LocalBackend) and local.containers is not None
    local.containers.engine.invalidate()
    return local.containers.engine.ps(local.containers.label)


def test_instance_runs_its_image_and_keeps_workspace_across_stop_start(csrv: Server) -> None:
    inst = create(csrv, image="python")
    assert inst["runtime"] == "container" and inst["image"] == "python" and inst["gpu_access"] == "virtual"
    code, out = run(
        csrv,
        inst,
        "grep PRETTY_NAME /etc/os-release; python3 -c 'print(6*7)'; pwd; echo kept > /workspace/note; echo lost > /root/scratch",
    )
    assert code == 0 and "bookworm" in out and "42" in out and "/workspace" in out, out
    csrv.post(f"/v1/instances/{inst['id']}/stop", expect=200)
    wait_state(csrv, "instance", inst["id"], ("stopped",))
    assert containers_of(csrv) == {}  # a stopped instance holds no container (and no GPU)
    csrv.post(f"/v1/instances/{inst['id']}/start", expect=200)
    wait_state(csrv, "instance", inst["id"], ("running",), 60)
    code, out = run(csrv, inst, "cat /workspace/note; cat /root/scratch 2>&1 || true")
    assert "kept" in out and "lost" not in out, out  # the volume persists, the container's own layer does not
    csrv.http.delete(f"/v1/instances/{inst['id']}", headers=csrv.headers)
    wait_until(lambda: csrv.http.get(f"/v1/instances/{inst['id']}", headers=csrv.headers).status_code == 404, 30)
    assert containers_of(csrv) == {}
    assert not (csrv.data_dir / "disks" / f"instance-{inst['id']}").exists()
    assert not (csrv.data_dir / "disks" / f"instance-{inst['id']}.ext4").exists()


def test_exec_exit_code_logs_and_limits(csrv: Server) -> None:
    inst = create(csrv, cpus=1.5, memory_gib=1)
    code, out = run(csrv, inst, "echo to-stdout; echo to-stderr >&2; exit 7")
    assert code == 7 and "to-stdout" in out and "to-stderr" in out
    code, out = run(
        csrv,
        inst,
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us "
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us /sys/fs/cgroup/pids/pids.max; df -m /dev/shm",
    )
    lines = out.split()
    assert code == 0, out
    assert int(lines[0]) == 1 << 30, out  # --memory from the request
    assert int(lines[1]) / int(lines[2]) == 1.5, out  # --cpus from the request
    assert int(lines[3]) == 4096, out  # pids limit
    logs = csrv.get(f"/v1/instances/{inst['id']}/logs")["text"]
    assert f"instance {inst['id']} ready" in logs


def test_disk_size_is_enforced(csrv: Server) -> None:
    inst = create(csrv, disk_gib=1)
    code, out = run(csrv, inst, "dd if=/dev/zero of=/workspace/fill bs=1M count=1200 2>&1; echo rc=$?; df -m /workspace")
    assert "No space left on device" in out and "rc=1" in out, out


def test_job_runs_in_the_container_and_exits_with_its_code(csrv: Server) -> None:
    local = csrv.ctx.backends["local"]
    assert isinstance(local, LocalBackend)
    told, tell_loop = threading.Event(), local.exits.on_exit
    assert tell_loop is not None, "the control loop listens for ends (ReportsExits)"
    local.exits.on_exit = lambda: (told.set(), tell_loop())  # type: ignore[func-returns-value]
    job = csrv.post(
        "/v1/jobs",
        {
            "name": "c",
            "image": "tiny",
            "resources": {"accelerators": "H100:2"},
            "run": "echo gpus=$CUDA_VISIBLE_DEVICES ws=$SUANLI_WORKDIR; test -e /etc/debian_version; sleep 1; exit 3",  # running when watched
            "checkpoint_dir": "ckpt",
        },
        expect=201,
    ).json()
    done = wait_state(csrv, "job", job["id"], ("succeeded", "failed"), 60)
    assert done["state"] == "failed" and done["exit_code"] == 3 and done["runtime"] == "container"
    logs = csrv.get(f"/v1/jobs/{job['id']}/logs")["text"]
    assert "gpus=0,1 ws=/workspace" in logs, logs  # BusyBox image: no /etc/debian_version of the host
    wait_until(lambda: containers_of(csrv) == {}, 10)  # exit code recorded, container removed
    assert told.is_set(), "the container's end was not told (its init's pidfd)"


def test_spot_notice_reaches_the_workload_inside_its_container(images: list[str], tmp_path: Path) -> None:
    """USR1 with a readable deadline inside the container, then TERM at the deadline; the
    job resumes from the checkpoint it saved."""
    inv = Inventory(nodes=[NodeDecl(name="one", gpu_model="H100", gpu_count=4, cpu_cores=16, memory_gib=64)])
    (tmp_path / "d").mkdir()
    srv = make_server(tmp_path / "d", inventory=inv, notice_s=2.0)
    try:
        workload = (
            'ckpt="$SUANLI_CHECKPOINT_DIR/step"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
            'trap \'echo "$step" > "$ckpt"; echo "usr1 deadline=$(cat $SUANLI_PREEMPT_DEADLINE_FILE) at=$(date +%s)"\' USR1; '
            "trap 'echo \"term at=$(date +%s)\"; exit 0' TERM; "
            'echo "start from=$step"; '
            "while true; do step=$((step + 1)); sleep 0.1; done"
        )
        spot = srv.post(
            "/v1/jobs",
            {
                "name": "spot",
                "image": "tiny",
                "run": workload,
                "checkpoint_dir": "ckpt",
                "resources": {"accelerators": "H100:4", "priority": "spot"},
            },
            expect=201,
        ).json()
        logs = lambda: srv.get(f"/v1/jobs/{spot['id']}/logs")["text"]  # noqa: E731
        wait_until(lambda: "start from=0" in logs(), 60)
        time.sleep(0.5)
        noticed = time.time()
        srv.post(
            "/v1/jobs", {"name": "od", "image": "tiny", "resources": {"accelerators": "H100:4"}, "run": "sleep 1"}, expect=201
        )
        text = wait_until(lambda: (t := logs()).count("start from") >= 2 and t, 60)
        deadline = int(text.split("usr1 deadline=")[1].split()[0])
        assert int(noticed) <= deadline <= noticed + 2 + 2, text  # the promised notice, read inside the container
        usr1_at = int(text.split("usr1 deadline=")[1].split("at=")[1].split()[0])
        term_at = int(text.split("term at=")[1].split()[0])
        assert usr1_at <= term_at and term_at >= deadline - 1, text  # USR1 first, TERM not before the deadline
        assert int(text.split("start from=")[2].split()[0]) > 0, text  # resumed from the step it saved
    finally:
        srv.close()


def test_two_node_job_reaches_its_master_across_containers(csrv: Server) -> None:
    """The nodes of a job are containers of one tenant network: MASTER_ADDR:MASTER_PORT of
    rank 0 answers in rank 1."""
    run_ = (
        'if [ "$NODE_RANK" = 0 ]; then echo ready | nc -l -p "$MASTER_PORT" > /dev/null; echo served; '
        'else for i in $(seq 1 100); do nc "$MASTER_ADDR" "$MASTER_PORT" < /dev/null && break; sleep 0.1; done; echo reached=$?; fi'
    )
    job = csrv.post(
        "/v1/jobs",
        {"name": "dist", "image": "tiny", "num_nodes": 2, "resources": {"accelerators": "H100:2"}, "run": run_},
        expect=201,
    ).json()
    done = wait_state(csrv, "job", job["id"], ("succeeded", "failed"), 60)
    logs = csrv.get(f"/v1/jobs/{job['id']}/logs")["text"]
    assert done["state"] == "succeeded", (done, logs)
    assert "ready" in logs and "reached=0" in logs and "served" in logs, logs


def test_a_job_fails_over_to_another_node_from_its_checkpoint(images: list[str], tmp_path: Path) -> None:
    """Node down: the old container is stopped, a new one on the other node resumes from
    the checkpoint in the job's volume."""
    inv = Inventory(nodes=[NodeDecl(name=f"n{i}", gpu_model="H100", gpu_count=2, cpu_cores=8, memory_gib=32) for i in (1, 2)])
    (tmp_path / "d").mkdir()
    srv = make_server(tmp_path / "d", inventory=inv)
    try:
        run_ = (
            'ckpt="$SUANLI_CHECKPOINT_DIR/step"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
            'echo "start from=$step on=$SUANLI_NODE_NAME"; '
            # written aside and renamed: the kill must not leave an empty checkpoint to resume from
            'while true; do step=$((step + 1)); echo "$step" > "$ckpt.new" && mv "$ckpt.new" "$ckpt"; sleep 0.1; done'
        )
        job = srv.post(
            "/v1/jobs",
            {"name": "fo", "image": "tiny", "run": run_, "checkpoint_dir": "ckpt", "resources": {"accelerators": "H100:2"}},
            expect=201,
        ).json()
        logs = lambda: srv.get(f"/v1/jobs/{job['id']}/logs")["text"]  # noqa: E731
        first = wait_until(lambda: "start from=0" in (t := logs()) and t, 60)
        node = first.split("on=")[1].split()[0]
        time.sleep(1.0)
        r = srv.http.patch(f"/v1/nodes/{node}", json={"state": "down"}, headers=srv.headers)
        assert r.status_code == 200, r.text
        text = wait_until(lambda: (t := logs()).count("start from") >= 2 and t, 60)
        resumed = text.split("start from=")[2]
        assert int(resumed.split()[0]) > 3 and f"on={node}" not in resumed, text
        names = list(containers_of(srv))
        assert len(names) == 1 and names[0].endswith(f"job-{job['id']}-0"), names  # the old one is gone
    finally:
        srv.close()
