"""The measurements, as PyTorch kernels timed the same way on a ``cuda`` or ``cpu`` device.

Every figure is the median of ``repeats`` timed runs after ``warmup`` untimed ones; a
timed run ends with ``torch.cuda.synchronize`` on a GPU (kernels are asynchronous), so
the clock sees the work done, not the launch. No CUDA is written by hand: matmul,
copy and all-reduce are torch's (cuBLAS, the copy engines, NCCL; on CPU: its BLAS,
memcpy and gloo).

torch is imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

#: (warm-up runs, timed runs, matmul side, copy MiB) per mode; ``quick`` is for tests and CI.
SIZES = {
    ("cuda", False): (5, 20, 8192, 1024),
    ("cuda", True): (2, 5, 4096, 256),
    ("cpu", False): (2, 5, 1024, 256),
    ("cpu", True): (1, 3, 256, 16),
}

DTYPES = {"cuda": ("bf16", "fp16", "fp8"), "cpu": ("fp32", "bf16")}


@dataclass(frozen=True)
class MemoryTest:
    ok: bool
    requested_bytes: int
    allocated_bytes: int
    verified_bytes: int
    seconds: float
    error: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _torch() -> Any:
    import torch

    return torch


def sync(device: Any) -> None:
    if device.type == "cuda":
        _torch().cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], device: Any, warmup: int, repeats: int, sync_also: Any = None) -> float:
    """The median wall time of ``fn`` over ``repeats`` runs, each waited for on ``device``."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    for _ in range(warmup):
        fn()
    sync(device)
    if sync_also is not None:
        sync(sync_also)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        if sync_also is not None:
            sync(sync_also)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_tflops(device: Any, dtype: str, n: int, warmup: int, repeats: int) -> float:
    """Dense ``n x n @ n x n`` throughput in TFLOPS (2 n^3 floating-point operations)."""
    torch = _torch()
    if dtype == "fp8":
        return _fp8_tflops(device, n, warmup, repeats)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    a = torch.randn(n, n, device=device, dtype=dt)
    b = torch.randn(n, n, device=device, dtype=dt)
    c = torch.empty(n, n, device=device, dtype=dt)
    seconds = median_seconds(lambda: torch.matmul(a, b, out=c), device, warmup, repeats)
    return 2 * n**3 / seconds / 1e12


def has_fp8(device: Any) -> bool:
    """FP8 tensor cores: compute capability 8.9 (Ada) or newer, and torch's scaled matmul."""
    torch = _torch()
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9) and hasattr(torch, "_scaled_mm")


def _fp8_tflops(device: Any, n: int, warmup: int, repeats: int) -> float:
    torch = _torch()
    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
    one = torch.ones((), device=device, dtype=torch.float32)
    seconds = median_seconds(
        lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), device, warmup, repeats
    )
    return 2 * n**3 / seconds / 1e12


def copy_gbs(src_device: Any, dst_device: Any, mib: int, warmup: int, repeats: int, count_both: bool) -> float:
    """Copy bandwidth in GB/s (decimal). ``count_both``: a device-local copy reads and
    writes each byte (STREAM's convention, which datasheet bandwidth compares with); a
    transfer between devices counts each byte once."""
    torch = _torch()
    nbytes = mib * 2**20
    pin = src_device.type == "cpu" and dst_device.type == "cuda"
    src = torch.empty(nbytes, dtype=torch.uint8, device=src_device, pin_memory=pin)
    src.fill_(7)
    pin_dst = dst_device.type == "cpu" and src_device.type == "cuda"
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dst_device, pin_memory=pin_dst)
    other = dst_device if dst_device != src_device else None
    seconds = median_seconds(lambda: dst.copy_(src, non_blocking=True), src_device, warmup, repeats, sync_also=other)
    return (2 if count_both else 1) * nbytes / seconds / 1e9


_PATTERN = -1640531535  # 0x9E3779B1 as int32 (Knuth's multiplicative hash): every word differs from its neighbours


def memory_test(device: Any, total_bytes: int, fraction: float = 0.95, chunk_mib: int = 1024, slice_mib: int = 64) -> MemoryTest:
    """Allocate ``fraction`` of ``total_bytes`` on ``device`` in chunks, write a pattern
    that differs in every 4-byte word and read it all back.

    An allocation that fails (the memory is not there, whatever NVML reports) or a word
    that reads back wrong fails the test; the result says how much was verified.
    """
    torch = _torch()
    t0 = time.perf_counter()
    want = int(total_bytes * fraction)
    words_per_chunk = chunk_mib * 2**20 // 4
    step = slice_mib * 2**20 // 4
    chunks: list[Any] = []
    allocated = verified = 0
    error: str | None = None

    def expected(start: int, stop: int, salt: int) -> Any:
        idx = torch.arange(start, stop, dtype=torch.int32, device=device)
        return idx.mul_(_PATTERN).add_(salt)

    try:
        try:
            while allocated < want:
                words = min(words_per_chunk, (want - allocated + 3) // 4)
                chunk = torch.empty(words, dtype=torch.int32, device=device)
                salt = len(chunks)
                for s in range(0, words, step):
                    chunk[s : s + step] = expected(s, min(s + step, words), salt)
                chunks.append(chunk)
                allocated += words * 4
            sync(device)
        except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            error = f"allocated {allocated / 2**20:,.0f} of {want / 2**20:,.0f} MiB: " + str(exc).splitlines()[0][:300]
            if chunks:  # the memory is full: give back one chunk, room for the read-back's temporaries
                chunks.pop()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        # read back what was written, also after a failed allocation: how much is really there
        for salt, chunk in enumerate(chunks):
            words = chunk.numel()
            for s in range(0, words, step):
                e = min(s + step, words)
                if not torch.equal(chunk[s:e], expected(s, e, salt)):
                    bad = int((chunk[s:e] != expected(s, e, salt)).nonzero()[0].item()) + s
                    raise RuntimeError(f"chunk {salt} word {bad} read back wrong")
                verified += (e - s) * 4
    except (RuntimeError, MemoryError) as exc:
        error = (error + "; " if error else "") + str(exc).splitlines()[0][:300]
    finally:
        del chunks
        if device.type == "cuda":
            torch.cuda.empty_cache()
    ok = error is None and verified >= want
    return MemoryTest(ok, want, allocated, verified, round(time.perf_counter() - t0, 3), error)


# ----------------------------------------------------------------------------- all-reduce


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _allreduce_rank(rank: int, world: int, port: int, device_type: str, mib: int, warmup: int, repeats: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        if device_type == "cuda":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        x = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)

        def once() -> None:
            dist.all_reduce(x)

        def barrier() -> None:
            sync(device)
            dist.barrier()

        for _ in range(warmup):
            once()
        barrier()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            once()
            sync(device)
            times.append(time.perf_counter() - t0)
        barrier()
        if rank == 0:
            out.put(statistics.median(times))
    finally:
        dist.destroy_process_group()


def allreduce_busbw(device_type: str, world: int, mib: int, warmup: int, repeats: int, timeout_s: float = 120) -> dict:
    """All-reduce of a ``mib`` MiB float32 buffer across ``world`` processes (one per GPU;
    NCCL on GPUs, gloo on CPU). Bus bandwidth as nccl-tests defines it: size / time x
    2 (n - 1) / n, comparable across world sizes and with the link's bandwidth."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = _free_port()
    env_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        procs = [
            ctx.Process(target=_allreduce_rank, args=(r, world, port, device_type, mib, warmup, repeats, out))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
        if any(p.is_alive() for p in procs):
            for p in procs:
                if p.is_alive():
                    p.kill()
            raise RuntimeError(f"all-reduce did not finish in {timeout_s:g} s")
        if any(p.exitcode != 0 for p in procs) or out.empty():
            raise RuntimeError(f"all-reduce failed: exit codes {[p.exitcode for p in procs]}")
        seconds = out.get()
    finally:
        if env_threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
    size = mib * 2**20
    algbw = size / seconds / 1e9
    return {
        "backend": "nccl" if device_type == "cuda" else "gloo",
        "ranks": world,
        "size_mib": mib,
        "seconds": round(seconds, 6),
        "algbw_gbs": round(algbw, 3),
        "busbw_gbs": round(algbw * 2 * (world - 1) / world, 3),
    }
