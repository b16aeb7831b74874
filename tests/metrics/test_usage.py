"""Reading usage: Podman's stats, a network namespace's TCP table, /proc for host
processes, and NVML (on a FAKE physical GPU: there is none here; see ``recorded``)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from suanli.backends.base import Handle
from suanli.backends.local import usage
from suanli.backends.local.backend import LocalBackend
from suanli.backends.local.nvml import GpuSampler
from tests.metrics.recorded import DOCKER_STATS, PODMAN_STATS, PROC_NET_TCP, FakeH100Nvml


def test_podman_stats_recording_parses_to_cumulative_cpu_and_memory() -> None:
    got = usage.parse_stats(PODMAN_STATS)
    assert sorted(got) == ["suanli-847988e5-job-1-0", "suanli-c18c4809-job-1-1"], got
    one = got["suanli-c18c4809-job-1-1"]
    assert one.cpu_ns == 6094835284 and one.memory_bytes == 627216384 and one.container_id.startswith("3ecb10a59c6b"), one
    assert usage.parse_stats("") == {} and usage.parse_stats("[]") == {}


def test_docker_stats_format_gives_its_own_percent_and_memory() -> None:
    (one,) = usage.parse_stats(DOCKER_STATS).values()
    assert (one.name, one.cpu_percent_now, one.memory_bytes) == ("suanli-1a2b3c4d-instance-3", 97.31, int(1.5 * 2**20)), one


def test_cpu_percent_is_the_difference_since_the_last_reading() -> None:
    m = usage.CpuMeter()
    assert m.percent("a", 10.0, 100.0, first=42.0) == (42.0, False)  # first reading: the average so far, not over an interval
    assert m.percent("a", 10.5, 101.0, first=0.0) == (50.0, True)  # half a core over one second
    assert m.percent("a", 10.5, 111.0, first=0.0) == (0.0, True)
    m.forget_except([])
    assert m.percent("a", 99.0, 112.0, first=7.0) == (7.0, False)


def test_a_first_reading_busy_since_start_is_not_activity() -> None:
    """A container's first reading is its average since start, start-up included: a busy
    start-up must not keep an idle instance from its auto-stop; the next reading, over an
    interval, judges it."""
    from suanli.control.autostop import AutostopSettings, is_active
    from suanli.control.metrics import combine

    settings = AutostopSettings()
    first = combine("instance", 1, 1, 0.0, [usage.sample("k", {}, 40.0, 2**20, None, 0, cpu_over_interval=False)])
    assert first.cpu_percent == 40.0 and not is_active(first, settings), first
    later = combine("instance", 1, 1, 1.0, [usage.sample("k", {}, 40.0, 2**20, None, 0)])
    assert is_active(later, settings), later


def test_sessions_count_established_inbound_connections_to_ssh_and_published_ports() -> None:
    assert usage.count_sessions([PROC_NET_TCP], {22}) == 1  # the listener, a TIME_WAIT and an outbound one do not count
    assert usage.count_sessions([PROC_NET_TCP], {8888}) == 0
    assert usage.session_ports({"ports": {"8888": 40001}}) == {22, 8888}


def test_nvml_device_reading_of_a_whole_gpu() -> None:
    sampler = GpuSampler(FakeH100Nvml())
    r = sampler.device(0)
    assert r is not None and (r.util_percent, r.memory_used_mib, r.power_w, r.scope) == (87.0, 40960.0, 352.817, "device"), r
    assert r.model == "NVIDIA H100 80GB HBM3" and r.uuid.startswith("GPU-5e0a"), r
    assert sampler.device(3) is None  # a GPU NVML does not know: not measured


def test_nvml_per_process_accounting_of_a_shared_gpu_counts_only_the_workloads_processes() -> None:
    sampler = GpuSampler(FakeH100Nvml(pids=(101, 202)))
    r = sampler.processes(0, lambda pid: pid == 101)
    assert r is not None and (r.util_percent, r.memory_used_mib, r.power_w, r.scope) == (30.0, 20480.0, None, "process"), r
    refused = GpuSampler(FakeH100Nvml(pids=(101,), process_util=False)).processes(0, lambda pid: True)
    assert refused is not None and refused.util_percent is None and refused.memory_used_mib == 20480.0, refused


def test_without_nvml_nothing_is_measured() -> None:
    class NoDriver:
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    sampler = GpuSampler(NoDriver())
    assert not sampler.available() and sampler.device(0) is None


def test_virtual_gpus_are_labelled_not_measured_never_given_a_number() -> None:
    s = usage.sample("instance-1", {"gpus": [0], "gpu_real": False}, 12.5, 2**30, None, 0)
    assert (s.gpu_util_percent, s.gpu_memory_mib, s.power_w, s.gpu_note) == (None, None, None, usage.VIRTUAL_NOTE), s
    assert (s.cpu_percent, s.memory_mib) == (12.5, 1024.0), s
    none = usage.sample("job-1-0", {"gpus": []}, 0.0, 0, None, None)
    assert none.gpu_note == "" and none.gpu_util_percent is None, none


def test_a_jobs_nodes_are_summed_and_its_gpu_utilisation_averaged() -> None:
    from suanli.backends.base import GpuReading, UsageSample
    from suanli.control.metrics import combine

    def node(key: str, util: float, node_name: str) -> UsageSample:
        g = GpuReading(0, f"GPU-{key}", "NVIDIA H100 80GB HBM3", util, 1000.0, 300.0)
        return UsageSample(key, 50.0, 100.0, util, 1000.0, 300.0, (g,), "", 1, node_name)

    u = combine("job", 9, 1, 0.0, [node("job-9-0", 80.0, "a"), node("job-9-1", 40.0, "b")])
    assert (u.cpu_percent, u.memory_mib, u.gpu_util_percent, u.gpu_memory_mib, u.power_w, u.sessions) == (
        100.0,
        200.0,
        60.0,
        2000.0,
        600.0,
        2,
    ), u
    assert [g["node"] for g in u.gpus] == ["a", "b"], u.gpus
    virtual = combine("job", 9, 1, 0.0, [UsageSample("job-9-0", 1.0, 1.0, gpu_note=usage.VIRTUAL_NOTE)])
    assert virtual.gpu_util_percent is None and virtual.gpu_note == usage.VIRTUAL_NOTE, virtual


def _process_handle(backend: LocalBackend, proc: subprocess.Popen, tmp: Path, **data: object) -> Handle:
    return Handle("local", "instance-7", {"runtime": "process", "pid": proc.pid, "pgid": proc.pid, "dir": str(tmp), **data})


def test_a_host_process_task_is_read_from_proc_busy_and_idle(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "root", "process")
    busy = subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
    idle = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        hb = _process_handle(backend, busy, tmp_path)
        hi = Handle("local", "instance-8", {"runtime": "process", "pid": idle.pid, "pgid": idle.pid, "dir": str(tmp_path)})
        backend.usage([hb, hi])
        time.sleep(1.0)
        got = {s.key: s for s in backend.usage([hb, hi])}
        assert got["instance-7"].cpu_percent > 10, got  # a core spinning (a shared machine under load: not 100)
        assert got["instance-8"].cpu_percent < 5, got
        assert got["instance-8"].memory_mib > 0 and got["instance-8"].sessions is None, got
    finally:
        for p in (busy, idle):
            os.killpg(p.pid, 9)
            p.wait()


def test_a_host_process_task_on_a_real_gpu_gets_nvml_figures(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "root", "process", gpus=GpuSampler(FakeH100Nvml()))
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        h = _process_handle(backend, proc, tmp_path, gpus=[0], gpu_real=True, milli_per_gpu=1000, node="node-1")
        (s,) = backend.usage([h])
        assert (s.gpu_util_percent, s.gpu_memory_mib, s.power_w, s.gpu_note) == (87.0, 40960.0, 352.817, ""), s
        assert s.gpus[0].uuid.startswith("GPU-5e0a") and s.node == "node-1", s
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_sessions_are_read_from_a_real_kernel_table() -> None:
    """An established connection to a listening port of this process's network namespace,
    read back from ``/proc/<pid>/net/tcp``: the kernel's own text, not a recording."""
    import random
    import socket

    # A port below the kernel's ephemeral range: sessions are counted by local port, over
    # every address and both families, and a port chosen by the kernel (``bind`` to port 0)
    # may be the local end of another test's client connection on ``::1`` at the same time
    # (seen: 2 sessions for 1). No client connection is ever given a port below the range.
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    server = socket.socket()
    for port in random.sample(range(max(1024, low - 8000), low), 50):
        try:
            server.bind(("127.0.0.1", port))
            break
        except OSError:
            continue
    server.listen()
    port = server.getsockname()[1]
    before = usage.count_sessions(usage.netns_tables(os.getpid()), {port})
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    try:
        assert before == 0
        assert usage.count_sessions(usage.netns_tables(os.getpid()), {port}) == 1  # the accepted side only
    finally:
        for s in (client, conn, server):
            s.close()
