"""Isolation that is tested: from inside tenant A's container, none of the probes of
``bench/isolation_probes.py`` reaches the server's files, tenant B's files, processes,
environment or network, the host's services, or the server's environment; and B is
left untouched. The process runtime, by contrast, is named for what it is."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.control.control_helpers import Server

_spec = importlib.util.spec_from_file_location("isolation_probes", Path(__file__).parents[2] / "bench" / "isolation_probes.py")
assert _spec and _spec.loader
probes = sys.modules["isolation_probes"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probes)


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(probes.CANARY, "server-secret-canary")
    return "server-secret-canary"


def test_no_probe_from_tenant_a_reaches_anything_it_must_not(canary: str, csrv: Server) -> None:
    exec_a, facts, b_untouched = probes.setup(csrv)
    assert facts["host_ports"] and facts["b_ip"], facts  # the probes aim at real targets
    results = probes.run_probes(exec_a, facts)
    breached = [(r.name, r.output) for r in results if r.breached]
    if breached:  # say what the networks looked like
        import subprocess

        nets = subprocess.run(
            ["podman", "network", "ls", "--format", "{{.Name}} {{.NetworkInterface}} {{range .Subnets}}{{.Subnet}}{{end}}"],
            capture_output=True,
            text=True,
        ).stdout
        mine = exec_a("ip -4 -o addr show | grep -v ' lo '; ip route")
        fw = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
        breached.append(("firewall", fw))
        breached.append(("networks", nets + "\nA: " + mine + f"\nB: {facts['b_ip']}"))
    assert breached == [], breached
    assert len(results) >= 15
    b_untouched()
    # the probes can fail: the network probe does connect where a connection is allowed (A's own service)
    exec_a("setsid python3 -m http.server 8888 > /dev/null 2>&1 < /dev/null & sleep 0.5")
    assert "BREACH" in exec_a(probes.connect([("127.0.0.1", 8888)]))
