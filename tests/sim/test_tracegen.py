"""The trace generator: regenerating a shipped openb variant gives its request mix."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from suanli.sim import tracegen as g

OPENB = Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba-gpu-2023"
needs_openb = pytest.mark.skipif(not (OPENB / "openb_pod_list_default.csv").exists(), reason="shared openb traces not present")


def share_hist(rows: list[g.Row]) -> np.ndarray:
    """Sharing pods by GPU milli in bins of 100, normalised."""
    c = Counter(int(r["gpu_milli"]) // 100 for r in rows if g.is_share(r))
    h = np.array([c.get(b, 0) for b in range(10)], float)
    return h / max(h.sum(), 1)


@needs_openb
@pytest.mark.parametrize(
    "family, value, shipped",
    [
        ("gpushare", 40, "gpushare40"),
        ("gpushare", 20, "gpushare20"),
        ("multigpu", 30, "multigpu30"),
        ("gpuspec", 20, "gpuspec20"),
        ("cpu", 2.0, "cpu235"),
        ("cpu", 0.5, "cpu072"),
    ],
)
def test_regenerating_a_shipped_variant_gives_its_request_mix(family, value, shipped):
    _, default = g.read_rows(OPENB / "openb_pod_list_default.csv")
    _, ship = g.read_rows(OPENB / f"openb_pod_list_{shipped}.csv")
    for seed in (1, 2):
        ours = g.variant(default, seed, **{family: value})
        mine, theirs = g.request_mix(ours), g.request_mix(ship)
        assert abs(len(ours) - len(ship)) <= 0.01 * len(ship), (len(ours), len(ship))
        diff = {k: round(mine.get(k, 0) - theirs.get(k, 0), 4) for k in theirs | mine}
        # Multi-GPU milli is the noisiest (~60 pods of up to 8,000 milli outside multigpuXX).
        tol = {k: 0.02 if k == "multigpu_milli" and family != "multigpu" else 0.011 for k in diff}
        assert all(abs(v) <= tol[k] for k, v in diff.items()), f"{shipped} seed {seed}: mix differs {diff}"
        tv = 0.5 * np.abs(share_hist(ours) - share_hist(ship)).sum()
        assert tv < 0.05, f"{shipped}: sharing pods' milli distribution differs (total variation {tv:.3f})"
        # No new pod shape: every generated pod is one the default trace asked for.
        shape = lambda r: (r["cpu_milli"], r["memory_mib"], r["num_gpu"], r["gpu_milli"])  # noqa: E731
        assert {shape(r) for r in ours} <= {shape(r) for r in default}


def rows(n_share: int, n_whole: int, n_multi: int, n_cpu: int) -> list[g.Row]:
    out = []
    for i in range(n_share):
        out.append(
            {"name": f"s{i}", "cpu_milli": "4000", "memory_mib": "1", "num_gpu": "1", "gpu_milli": str(200 + 50 * (i % 10))}
        )
    for i in range(n_whole):
        out.append({"name": f"w{i}", "cpu_milli": "8000", "memory_mib": "1", "num_gpu": "1", "gpu_milli": "1000"})
    for i in range(n_multi):
        out.append({"name": f"m{i}", "cpu_milli": "32000", "memory_mib": "1", "num_gpu": str(2 << (i % 3)), "gpu_milli": "1000"})
    for i in range(n_cpu):
        out.append({"name": f"c{i}", "cpu_milli": str(1000 * (1 + i % 7)), "memory_mib": "1", "num_gpu": "0", "gpu_milli": "0"})
    for i, r in enumerate(out):
        r["creation_time"] = str(i)
    return out


@pytest.mark.parametrize("percent", [10, 35, 50, 70, 90])
def test_gpushare_meets_its_percentage_and_keeps_the_pod_count(percent):
    base = rows(300, 600, 20, 100)
    out = g.variant(base, 3, gpushare=percent)
    assert len(out) == len(base)
    assert abs(g.share_fraction(out) - percent / 100) < 0.01
    assert sum(1 for r in out if r["num_gpu"] == "0") == 100


@pytest.mark.parametrize("percent", [15, 45, 60])
def test_multigpu_adds_copies_until_the_percentage(percent):
    base = rows(300, 600, 20, 100)
    out = g.variant(base, 3, multigpu=percent)
    assert g.multigpu_fraction(out) >= percent / 100 > g.multigpu_fraction(out[:-1]) - 0.02
    assert len(out) >= len(base)


def test_mixes_are_seeded_and_names_are_renumbered():
    base = rows(300, 600, 20, 100)
    a = g.variant(base, 9, cpu=1.5, gpushare=50, multigpu=25, gpuspec=15)
    b = g.variant(base, 9, cpu=1.5, gpushare=50, multigpu=25, gpuspec=15)
    assert a == b
    assert [r["name"] for r in a] == [f"openb-pod-{i:04d}" for i in range(len(a))]
    assert abs(g.spec_fraction(a) - 0.15) < 0.01
    assert abs(g.cpu_only_cpu(a) / g.cpu_only_cpu(base) - 1.5) < 0.02
    with pytest.raises(ValueError, match="unknown families"):
        g.variant(base, 1, gpuspecs=3)


def test_scale_nodes_keeps_the_make_up():
    nodes = [
        {"sn": f"n{i}", "model": "G2" if i % 3 else "T4", "gpu": "8", "cpu_milli": "96000", "memory_mib": "1"} for i in range(30)
    ]
    half = g.scale_nodes(nodes, 0.5, np.random.default_rng(0))
    double = g.scale_nodes(nodes, 2.0, np.random.default_rng(0))
    assert len(half) == 15 and len(double) == 60
    assert Counter(r["model"] for r in half) == {"G2": 10, "T4": 5}
    assert len({r["sn"] for r in double}) == 60
