"""``suanli verify``: identity, measurements and verdicts for this machine's GPUs, as one report.

The report is the ``suanli verify --json`` contract (scripts rely on it):

- ``device``: ``"cuda"`` or ``"cpu"``;
- ``gpus``: one object per GPU with ``name``, ``memory_total_mib``, ``virtualization``,
  ``memory_test_ok``, ``tflops`` ({dtype: TFLOPS}), ``tflops_ratio`` (best dense 16-bit
  against the catalog's dense peak), ``bandwidth_gbs`` (device memory copy), and more
  (identity, ratios, host<->device and peer-to-peer bandwidth, the verdict);
- without an NVIDIA GPU: ``device: "cpu"``, ``gpus: []`` and a ``cpu`` section measured
  by the same code on CPU tensors.
"""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from suanli.verify import measure
from suanli.verify.datasheet import catalog_model, datasheet
from suanli.verify.identity import GpuIdentity, NodeIdentity, nvml_identity
from suanli.verify.judge import Measured, Thresholds, judge

NO_GPU = "no NVIDIA GPU here (NVML found none, or torch sees no CUDA device): measured the CPU path of the same code"


class TorchMissing(RuntimeError):
    """torch is not installed: ``pip install 'suanli[torch]'``."""


@dataclass(frozen=True)
class Options:
    quick: bool = False
    expect: str | None = None  # the catalog model the node is registered as; default: what NVML says
    thresholds: Thresholds = Thresholds()
    force_cpu: bool = False
    allreduce: bool = True
    cpu_memory_mib: int = 256  # CPU path: how much host memory the pattern test checks


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise TorchMissing("suanli verify needs PyTorch: pip install 'suanli[torch]' (torch==2.13.0)") from None
    return torch


def _safe(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except Exception as exc:  # a measurement that fails is reported, the others still run
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def measure_device(
    torch: Any, device: Any, total_bytes: int, opts: Options, progress: Callable[[str], None], peers: int = 0
) -> dict:
    """The measurements of one device, the same code for a GPU and the CPU path: the
    memory pattern test over 95 % of ``total_bytes``, dense matmul per dtype, a
    device-local copy; on a GPU also host<->device, each peer and the CUDA runtime's
    memory total."""
    cuda = device.type == "cuda"
    label = f"GPU {device.index}" if cuda else "CPU"
    warmup, repeats, n, mib = measure.SIZES[(device.type, opts.quick)]
    errors: dict[str, str] = {}

    def attempt(key: str, fn: Callable[[], Any]) -> Any:
        value, err = _safe(fn)
        if err:
            errors[key] = err
        return value

    cuda_total = torch.cuda.mem_get_info(device)[1] if cuda else None  # a hook on NVML alone shows here
    progress(f"{label}: memory pattern test")
    total_mib = max(1, total_bytes // 2**20)
    chunk, part = (1024, 64) if cuda else (max(1, total_mib // 4), max(1, total_mib // 8))
    mem = measure.memory_test(device, total_bytes, chunk_mib=chunk, slice_mib=part)
    tflops: dict[str, float] = {}
    for dtype in measure.DTYPES[device.type]:
        if dtype == "fp8" and not measure.has_fp8(device):
            continue
        progress(f"{label}: {dtype} matmul")
        value = attempt(f"matmul_{dtype}", partial(measure.matmul_tflops, device, dtype, n, warmup, repeats))
        if value is not None:
            tflops[dtype] = round(value, 2 if cuda else 4)
    progress(f"{label}: bandwidth")
    bw = attempt("device_copy", lambda: measure.copy_gbs(device, device, mib, warmup, repeats, count_both=True))
    h2d = d2h = None
    p2p: dict[str, dict] = {}
    if cuda:
        cpu = torch.device("cpu")
        h2d = attempt("host_to_device", lambda: measure.copy_gbs(cpu, device, mib, warmup, repeats, count_both=False))
        d2h = attempt("device_to_host", lambda: measure.copy_gbs(device, cpu, mib, warmup, repeats, count_both=False))
        for j in range(peers):
            if j == device.index:
                continue
            other = torch.device("cuda", j)
            value = attempt(f"p2p_{j}", partial(measure.copy_gbs, device, other, mib, warmup, repeats, count_both=False))
            p2p[str(j)] = {"gbs": _round(value), "peer_access": bool(torch.cuda.can_device_access_peer(device.index, j))}
    return {
        "memory": mem,
        "cuda_memory_total_mib": None if cuda_total is None else round(cuda_total / 2**20, 1),
        "matmul_n": n,
        "tflops": tflops,
        "bandwidth_gbs": bw,
        "h2d": h2d,
        "d2h": d2h,
        "p2p": p2p,
        "errors": errors,
    }


def gpu_entry(ident: GpuIdentity, node: NodeIdentity, measured: dict, opts: Options) -> dict:
    """One ``gpus`` entry of the report: identity, numbers, the catalog's promise and the verdict."""
    registered = opts.expect or catalog_model(ident.name) or ident.name
    sheet = datasheet(registered)
    mem = measured["memory"]
    m = Measured(
        nvml_model=catalog_model(ident.name),
        nvml_name=ident.name,
        memory_total_mib=ident.memory_total_mib,
        virtualization=ident.virtualization,
        mig_mode=ident.mig_mode,
        memory_test_ok=mem.ok,
        # passed: NVML's total holds (95 % of it was written and read back); failed: what was verified
        memory_verified_bytes=ident.memory_total_mib * 2**20 if mem.ok else mem.verified_bytes,
        tflops=measured["tflops"],
        bandwidth_gbs=measured["bandwidth_gbs"],
        pcie_gen=ident.pcie_gen,
        pcie_gen_max=ident.pcie_gen_max,
        pcie_width=ident.pcie_width,
        pcie_width_max=ident.pcie_width_max,
        cuda_memory_total_mib=measured.get("cuda_memory_total_mib"),
    )
    verdict = judge(registered if opts.expect else None, sheet, m, opts.thresholds)
    return {
        **ident.as_dict(),
        "driver_version": node.driver_version,
        "cuda_version": node.cuda_version,
        "identity_source": node.source,
        "catalog": None
        if sheet is None
        else {
            "model": sheet.model,
            "memory_gb": sheet.memory_gb,
            "bandwidth_gbs": sheet.bandwidth_gbs,
            "tflops": {"bf16": sheet.tflops_16bit, "fp16": sheet.tflops_16bit, "fp8": sheet.tflops_fp8},
        },
        "cuda_memory_total_mib": measured.get("cuda_memory_total_mib"),
        "memory_test_ok": mem.ok,
        "memory_test": mem.as_dict(),
        "memory_ratio": verdict.memory_ratio,
        "tflops": measured["tflops"],
        "tflops_ratio": verdict.tflops_ratio,
        "tflops_ratios": verdict.tflops_ratios,
        "bandwidth_gbs": _round(measured["bandwidth_gbs"]),
        "bandwidth_ratio": verdict.bandwidth_ratio,
        "host_to_device_gbs": _round(measured["h2d"]),
        "device_to_host_gbs": _round(measured["d2h"]),
        "p2p_gbs": measured["p2p"],
        "errors": measured["errors"],
        "ok": verdict.ok,
        "reasons": verdict.reasons,
        "notes": verdict.notes,
    }


def measure_cpu(torch: Any, opts: Options, progress: Callable[[str], None]) -> dict:
    """The CPU path: ``measure_device`` on CPU tensors (the memory test over
    ``cpu_memory_mib``, not over the host's RAM), and the all-reduce across two processes."""
    mem_mib = min(opts.cpu_memory_mib, 32) if opts.quick else opts.cpu_memory_mib
    m = measure_device(torch, torch.device("cpu"), mem_mib * 2**20, opts, progress)
    errors = dict(m["errors"])
    allreduce = None
    if opts.allreduce and not opts.quick:  # two spawned processes: seconds, more than --quick is for
        progress("CPU: all-reduce (gloo, 2 processes)")
        _, repeats, _, _ = measure.SIZES[("cpu", opts.quick)]
        allreduce, err = _safe(lambda: measure.allreduce_busbw("cpu", 2, 64, 1, repeats))
        if err:
            errors["allreduce"] = err
    return {
        "name": _cpu_name(),
        "threads": torch.get_num_threads(),
        "memory_test_ok": m["memory"].ok,
        "memory_test": m["memory"].as_dict(),
        "matmul_n": m["matmul_n"],
        "tflops": m["tflops"],
        "bandwidth_gbs": _round(m["bandwidth_gbs"]),
        "allreduce": allreduce,
        "errors": errors,
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cuda_uuids(torch: Any) -> list[str | None]:
    """Each CUDA device's UUID as NVML spells it ("GPU-..."), None where torch does not say."""
    out: list[str | None] = []
    for i in range(torch.cuda.device_count()):
        uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        out.append(None if uuid is None else "GPU-" + str(uuid).removeprefix("GPU-"))
    return out


def match_cuda_devices(nvml: list[GpuIdentity], cuda: list[str | None]) -> tuple[list[GpuIdentity], str | None]:
    """NVML's GPUs in CUDA's order, each with its CUDA index: the two number GPUs
    differently when CUDA_VISIBLE_DEVICES (or a container) shows CUDA a subset, so they
    are matched by UUID; by position where a UUID is missing. The note says what differed."""
    by_uuid = {g.uuid: g for g in nvml}
    out: list[GpuIdentity] = []
    for i, uuid in enumerate(cuda):
        found = by_uuid.get(uuid) if uuid else None
        if found is None and not uuid and i < len(nvml):
            found = nvml[i]
        if found is not None:
            out.append(replace(found, index=i))
    note = None
    if len(out) != len(nvml) or len(out) != len(cuda):
        note = f"NVML lists {len(nvml)} GPUs, CUDA sees {len(cuda)}: measured the {len(out)} both see"
    return out, note


def verify(
    opts: Options = Options(), identity: NodeIdentity | None = None, progress: Callable[[str], None] = lambda s: None
) -> dict:
    """Run the checks on this machine and return the report (see the module docstring)."""
    torch = _import_torch()
    if identity is None and not opts.force_cpu:
        identity = nvml_identity()
    cuda = not opts.force_cpu and torch.cuda.is_available() and identity is not None
    report: dict[str, Any] = {
        "device": "cuda" if cuda else "cpu",
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "torch_version": torch.__version__,
        "quick": opts.quick,
        "thresholds": opts.thresholds.as_dict(),
        "expected_model": opts.expect,
        "gpus": [],
    }
    if not cuda:
        if opts.force_cpu:
            report["message"] = "forced CPU path (--cpu)"
        elif identity is not None:
            report["message"] = (
                f"NVML sees {len(identity.gpus)} GPUs but this torch ({torch.__version__}) has no CUDA: "
                "install a CUDA build of torch; measured the CPU path of the same code"
            )
        else:
            report["message"] = NO_GPU
        report["cpu"] = measure_cpu(torch, opts, progress)
        report["allreduce"] = None
        report["ok"] = True
        return report
    assert identity is not None
    gpus, note = match_cuda_devices(identity.gpus, cuda_uuids(torch))
    if note:
        report["message"] = note
    for ident in gpus:
        device = torch.device("cuda", ident.index)
        measured = measure_device(torch, device, int(ident.memory_total_mib * 2**20), opts, progress, peers=len(gpus))
        report["gpus"].append(gpu_entry(ident, identity, measured, opts))
    report["allreduce"] = None
    if opts.allreduce and len(gpus) > 1:
        progress(f"all-reduce across {len(gpus)} GPUs (NCCL)")
        warmup, repeats, _, mib = measure.SIZES[("cuda", opts.quick)]
        report["allreduce"], err = _safe(lambda: measure.allreduce_busbw("cuda", len(gpus), mib, warmup, repeats))
        if err:
            report["allreduce_error"] = err
    report["ok"] = all(g["ok"] for g in report["gpus"])
    return report
