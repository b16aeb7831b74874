"""Keep containers off the host's own services and off other tenants' networks.

A container can open connections to the host through its gateway address: every host
service listening on ``0.0.0.0`` would be reachable. Two INPUT rules per bridge close
that: replies to connections the host opened (the port proxy reaching a published port)
are accepted, anything new from the bridge is dropped.

Tenants' bridges must not reach each other either. Netavark's ``isolate=true`` does that
with chains shared by every isolated network, and its teardown of one network was seen
to remove the shared ``FORWARD`` jump, leaving every tenant reachable from every other
(tests/containers/test_container_isolation.py caught it with two servers at work). So each
bridge also gets a chain of its own, ``SUANLI-<bridge>``, jumped to from ``FORWARD``:
forwarding from it to any other container bridge is dropped, and so is forwarding to any
address of the engines' container pools: while another network's bridge is down (netavark
removes it with its last container) its subnet has no route here, so a packet for its
gateway left through the uplink and came back as if from outside, past the INPUT rules
(seen: host services reached that way). Traffic to the outside world (package installs)
is untouched.
"""

from __future__ import annotations

import logging
import shutil
import subprocess

log = logging.getLogger(__name__)

COMMENT = "suanli: containers may not reach host services"


def _rules(iface: str) -> list[list[str]]:
    base = ["INPUT", "-i", iface, "-m", "comment", "--comment", COMMENT]
    return [base + ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"], base + ["-j", "DROP"]]


def _iptables(*args: str) -> int:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, timeout=30).returncode


#: The engines' default subnet pools (Podman: 10.88.0.0/16 and 10.89.0.0/16 onwards;
#: Docker: 172.17.0.0/16 onwards): never a destination forwarded from a tenant's bridge.
CONTAINER_POOLS = ("10.88.0.0/15", "172.17.0.0/16")

#: Names the engines give bridges: Podman/netavark, CNI, Docker.
BRIDGES = ("podman+", "cni-+", "cni+", "docker+", "br-+")


def _chain(iface: str) -> str:
    return f"SUANLI-{iface}"[:28]


def _isolate(iface: str) -> bool:
    """The bridge's own FORWARD chain (idempotent)."""
    chain = _chain(iface)
    jump = ["FORWARD", "-i", iface, "-m", "comment", "--comment", COMMENT, "-j", chain]
    if _iptables("-C", *jump) == 0:
        return True
    _iptables("-N", chain)
    _iptables("-F", chain)
    ok = _iptables("-A", chain, "-o", iface, "-j", "RETURN") == 0
    for other in BRIDGES:
        ok = ok and _iptables("-A", chain, "-o", other, "-j", "DROP") == 0
    for pool in CONTAINER_POOLS:  # a bridge that is down has no route: its subnet would go out the uplink
        ok = ok and _iptables("-A", chain, "-d", pool, "-j", "DROP") == 0
    return ok and _iptables("-I", "FORWARD", "1", *jump[1:]) == 0


def guard(iface: str) -> bool:
    """Install the rules for ``iface`` (idempotent); False when they could not be."""
    if not iface or not shutil.which("iptables"):
        return False
    accept, drop = _rules(iface)
    try:
        if not _isolate(iface):
            log.warning("could not isolate bridge %s from the other container networks", iface)
            return False
        if _iptables("-C", *accept) == 0 and _iptables("-C", *drop) == 0:
            return True
        while _iptables("-D", *accept) == 0:
            pass
        while _iptables("-D", *drop) == 0:
            pass
        ok = _iptables("-I", *drop[:1], "1", *drop[1:]) == 0 and _iptables("-I", *accept[:1], "1", *accept[1:]) == 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("firewall for %s: %s", iface, exc)
        return False
    if not ok:
        log.warning("could not install the host firewall rules for %s: containers there can reach host services", iface)
    return ok


def unguard(iface: str) -> None:
    """Remove the rules of a bridge that is gone."""
    if not iface or not shutil.which("iptables"):
        return
    for rule in _rules(iface):
        while _iptables("-D", *rule) == 0:
            pass
    chain = _chain(iface)
    while _iptables("-D", "FORWARD", "-i", iface, "-m", "comment", "--comment", COMMENT, "-j", chain) == 0:
        pass
    _iptables("-F", chain)
    _iptables("-X", chain)
