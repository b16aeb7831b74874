"""The measurements (``suanli.verify.measure``) on CPU tensors: the same code a GPU runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from suanli.verify import measure
from tests.verify.torch_helpers import require_torch


def test_the_median_of_the_timed_runs_is_reported_after_the_warmup() -> None:
    torch = require_torch()
    calls: list[int] = []
    seconds = measure.median_seconds(lambda: calls.append(1), torch.device("cpu"), warmup=2, repeats=3)
    assert len(calls) == 5 and 0 <= seconds < 0.1, (calls, seconds)
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        measure.median_seconds(lambda: None, torch.device("cpu"), 0, 0)


def test_matmul_and_copy_give_positive_figures_on_cpu() -> None:
    torch = require_torch()
    cpu = torch.device("cpu")
    for dtype in ("fp32", "bf16"):
        tflops = measure.matmul_tflops(cpu, dtype, 128, 1, 2)
        assert 0 < tflops < 100, (dtype, tflops)
    gbs = measure.copy_gbs(cpu, cpu, 4, 1, 2, count_both=True)
    assert 0 < gbs < 10_000, gbs
    assert not measure.has_fp8(cpu)


def test_the_memory_test_writes_and_reads_back_95_percent() -> None:
    torch = require_torch()
    mt = measure.memory_test(torch.device("cpu"), 8 * 2**20, chunk_mib=2, slice_mib=1)
    assert mt.ok and mt.error is None, mt
    assert mt.verified_bytes >= mt.requested_bytes == int(8 * 2**20 * 0.95), mt


def test_memory_that_is_reported_but_not_there_fails_the_test() -> None:
    """A host that claims more memory than it lets a process allocate (here: an address
    space limit, the CPU stand-in for a hook that fakes the GPU's memory total)."""
    require_torch()
    code = textwrap.dedent(
        """
        import json, resource, torch
        from suanli.verify import measure
        vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + 256 * 2**20, resource.RLIM_INFINITY))
        print(json.dumps(measure.memory_test(torch.device("cpu"), 8 * 2**30, chunk_mib=64).as_dict()))
        """
    )
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    mt = json.loads(out.stdout.strip().splitlines()[-1])
    assert not mt["ok"] and mt["error"], mt
    assert 0 < mt["verified_bytes"] < 512 * 2**20 < mt["requested_bytes"], mt


def test_an_allreduce_across_two_cpu_processes_reports_bus_bandwidth() -> None:
    require_torch()
    r = measure.allreduce_busbw("cpu", 2, 1, 1, 2)
    assert (r["backend"], r["ranks"]) == ("gloo", 2) and r["busbw_gbs"] > 0, r
    assert r["busbw_gbs"] == pytest.approx(r["algbw_gbs"], rel=0.01), r  # 2 (n-1)/n = 1 for two ranks
