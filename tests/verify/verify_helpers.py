"""Reports as ``suanli verify --json`` prints them on a GPU node, for the server-side tests.

Identity comes from the recordings (real GPUs' NVML answers, ``recordings/``); the
measured figures stand in for the GPUs' kernels (no GPU was lent to this session):
[MLE]'s published matmul results for H100 SXM (794.5 BF16 TFLOPS) and A100 SXM
(271.2), shared/reference/microbench_refs.md, and a pattern test that passed.
"""

from __future__ import annotations

from pathlib import Path

from suanli.verify.identity import RecordedNvml, read_identity
from suanli.verify.measure import MemoryTest
from suanli.verify.run import Options, gpu_entry

RECORDINGS = Path(__file__).parent / "recordings"
PUBLISHED_BF16 = {"h100_sxm5_x8.json": 794.5, "a100_sxm4_x4.json": 271.2, "vgpu_v100d_8c.json": 20.0}


def measured(total_mib: float, bf16: float, ok: bool = True) -> dict:
    want = int(total_mib * 2**20 * 0.95)
    verified = want if ok else want // 4
    mem = MemoryTest(ok, want, verified, verified, 10.0, None if ok else "CUDA out of memory")
    return {"memory": mem, "tflops": {"bf16": bf16}, "bandwidth_gbs": 2500.0, "h2d": 50.0, "d2h": 50.0, "p2p": {}, "errors": {}}


def cuda_report(recording: str, gpus: int, bf16: float | None = None, memory_ok: bool = True) -> dict:
    """A report of ``gpus`` GPUs like the recording's first one (index and UUID per GPU)."""
    node = read_identity(RecordedNvml.load(RECORDINGS / recording), source="recording")
    entries = []
    for i in range(gpus):
        ident = node.gpus[i % len(node.gpus)]
        entry = gpu_entry(ident, node, measured(ident.memory_total_mib, bf16 or PUBLISHED_BF16[recording], memory_ok), Options())
        entries.append({**entry, "index": i})
    return {"device": "cuda", "measured_at": "2026-12-03T10:00:00+00:00", "gpus": entries, "allreduce": None, "ok": True}


def cpu_report() -> dict:
    return {"device": "cpu", "gpus": [], "cpu": {"name": "a CPU", "tflops": {"fp32": 0.01}}, "ok": True}
