"""Recordings and the one fake the metrics suites use.

- ``PODMAN_STATS``: ``podman stats --no-stream --format '{{json .ContainerStats}}'``
  as Podman 4.3.1 printed it on the development machine (two containers).
- ``PROC_NET_TCP``: ``/proc/<pid>/net/tcp`` of a container with sshd listening on 22, one
  SSH session in, and one connection of its own out (to port 443), in the kernel's format.
- ``FakeH100Nvml``: a FAKE physical GPU (there is none on the machines these tests run
  on): the few ``pynvml`` functions ``GpuSampler`` calls, answering with figures recorded
  from an H100 SXM under load (``nvidia-smi -q`` on a rented node). It is the only fake
  in these suites: everything else is real (Podman, /proc, the database).
"""

from __future__ import annotations

from dataclasses import dataclass

PODMAN_STATS = (
    '{"AvgCPU":69.93910043667978,"ContainerID":"0ccdf8c528b96c7af795ca9009835f003df6d5a9ab5e58176e0b8fffac5a7fd5",'
    '"Name":"suanli-847988e5-job-1-0","PerCPU":[32706881,1204983],"CPU":69.93910043667978,"CPUNano":33911864,'
    '"CPUSystemNano":12000000,"SystemNano":1796294505308295761,"MemUsage":1224704,"MemLimit":17179869184,'
    '"MemPerc":0.007128715515136719,"NetInput":90,"NetOutput":398,"BlockInput":0,"BlockOutput":0,"PIDs":5,'
    '"UpTime":33911864,"Duration":33911864}\n'
    '{"AvgCPU":44.07,"ContainerID":"3ecb10a59c6b11aa22bb33cc44dd55ee66ff778899aabbccddeeff0011223344",'
    '"Name":"suanli-c18c4809-job-1-1","PerCPU":[],"CPU":44.07,"CPUNano":6094835284,"CPUSystemNano":0,'
    '"SystemNano":1796294505308295761,"MemUsage":627216384,"MemLimit":17179869184,"MemPerc":3.48,'
    '"NetInput":23280,"NetOutput":24110,"BlockInput":0,"BlockOutput":0,"PIDs":11,"UpTime":6094835284,'
    '"Duration":6094835284}\n'
)

#: ``docker stats --no-stream --format '{{json .}}'``: one line in the format Docker Engine
#: documents (``CPUPerc``, ``MemUsage`` as text), written here, not recorded (no Docker here).
DOCKER_STATS = (
    '{"BlockIO":"0B / 0B","CPUPerc":"97.31%","Container":"4bd2c9a1f0e3","ID":"4bd2c9a1f0e3",'
    '"MemPerc":"0.02%","MemUsage":"1.5MiB / 7.6GiB","Name":"suanli-1a2b3c4d-instance-3","NetIO":"1.2kB / 0B","PIDs":"3"}\n'
)

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41571 1 0000000000000000 100 0 0 10 0
   1: 0300590A:0016 0100590A:A2C4 01 00000000:00000000 02:000A7F6E 00000000     0        0 41602 2 0000000000000000 20 4 31 10 -1
   2: 0300590A:D3B2 5DB8D822:01BB 01 00000000:00000000 00:00000000 00000000     0        0 41700 1 0000000000000000 20 4 30 10 -1
   3: 0300590A:0016 0100590A:A2C6 06 00000000:00000000 03:00000F9D 00000000     0        0 0 3 0000000000000000
"""


@dataclass
class _Util:
    gpu: int
    memory: int


@dataclass
class _Mem:
    total: int
    used: int
    free: int


@dataclass
class _Proc:
    pid: int
    usedGpuMemory: int | None


@dataclass
class _ProcSample:
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


class FakeH100Nvml:
    """A FAKE physical GPU (see the module docstring): index 0 only."""

    NAME = b"NVIDIA H100 80GB HBM3"
    UUID = b"GPU-5e0a7c1b-52b3-d8a0-9c1e-6b3f2a1d4e77"

    def __init__(self, pids: tuple[int, ...] = (), process_util: bool = True) -> None:
        self.pids = pids  #: host pids "running on" the GPU, 20 GiB each
        self.process_util = process_util  #: False: the driver refuses per-process utilisation
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i != 0:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return 0

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.NAME

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return self.UUID

    def nvmlDeviceGetUtilizationRates(self, h: int) -> _Util:
        return _Util(gpu=87, memory=41)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> _Mem:
        return _Mem(total=81559 * 2**20, used=40960 * 2**20, free=40599 * 2**20)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 352817  # milliwatts

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[_Proc]:
        return [_Proc(p, 20480 * 2**20) for p in self.pids]

    def nvmlDeviceGetProcessUtilization(self, h: int, last_seen: int) -> list[_ProcSample]:
        if not self.process_util:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return [_ProcSample(p, 1_700_000_000_000_000 + i, 30, 10, 0, 0) for i, p in enumerate(self.pids)]
