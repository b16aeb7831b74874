"""The parsed-trace cache (``suanli.sim.trace_cache``): a second load of an unchanged file
is served from disk, a changed file is parsed again, and a broken cache never fails a load."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from suanli.sim import trace_cache
from suanli.sim.traces import TraceError, load_nodes, load_pods

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUANLI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "traces"


def pod_list(path: Path, cpu: int, rows: int = 1500) -> Path:
    """A pod list over ``trace_cache.MIN_BYTES``; every pod asks ``cpu`` milli-CPU."""
    body = "".join(f"pod-{k:05d},{cpu},2048,1,500,V100M16|V100M32,LS,Running,{k},{k + 60},{k}\n" for k in range(rows))
    path.write_text(HEADER + body)
    assert path.stat().st_size >= trace_cache.MIN_BYTES
    return path


def test_an_unchanged_file_is_served_from_the_cache(tmp_path: Path, cache: Path) -> None:
    path = pod_list(tmp_path / "pods.csv", cpu=4000)
    first = load_pods(path)
    assert len(first) == 1500 and len(list(cache.glob("*.pickle"))) == 1
    # same size, same modification time, other content: only a cache can still say 4000
    stat = path.stat()
    pod_list(path, cpu=8000)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = load_pods(path)
    assert again == first and again[0].request.cpu_milli == 4000


def test_a_changed_file_is_parsed_again_and_replaces_its_entry(tmp_path: Path, cache: Path) -> None:
    path = pod_list(tmp_path / "pods.csv", cpu=4000)
    load_pods(path)
    stat = path.stat()
    pod_list(path, cpu=8000)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert {p.request.cpu_milli for p in load_pods(path)} == {8000}
    assert len(list(cache.glob("*.pickle"))) == 1


def test_a_corrupt_or_unwritable_cache_still_loads(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = pod_list(tmp_path / "pods.csv", cpu=4000)
    expected = load_pods(path)
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    assert load_pods(path) == expected
    assert load_pods(path) == expected  # rewritten whole by the load before
    monkeypatch.setenv("SUANLI_CACHE_DIR", str(path))  # a file, not a directory: nothing can be stored
    assert load_pods(path) == expected


def test_bad_rows_are_refused_every_time_and_small_files_are_not_cached(tmp_path: Path, cache: Path) -> None:
    path = pod_list(tmp_path / "pods.csv", cpu=4000)
    with path.open("a") as f:
        f.write("pod-bad,abc,2048,1,500,,LS,Running,0,1,0\n")
    for _ in range(2):
        with pytest.raises(TraceError, match=r":1502: field 'cpu_milli'"):
            load_pods(path)
    small = tmp_path / "nodes.csv"
    small.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,8,V100M32\n")
    assert load_nodes(small)[0].gpu_count == 8
    assert not cache.exists() or not list(cache.glob("*.pickle"))
