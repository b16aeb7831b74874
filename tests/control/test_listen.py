"""The API's listening sockets (``api.parts.listen``), real sockets on loopback: one per
API worker on one port, new connections spread across them by the kernel, and a port
that another server holds refused, whichever way it holds it."""

from __future__ import annotations

import socket

import pytest

from suanli.api.parts import listen


def _accepted(sock: socket.socket) -> int:
    sock.setblocking(False)
    n = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


def test_each_worker_gets_a_socket_and_a_burst_of_connections_is_spread() -> None:
    socks = listen("127.0.0.1", 0, "API", 2)
    try:
        port = socks[0].getsockname()[1]
        assert [s.getsockname()[1] for s in socks] == [port, port]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
        counts = [_accepted(s) for s in socks]
        assert sum(counts) == 40 and min(counts) > 0, counts  # all on one: about 2 in 10^12
        for c in clients:
            c.close()
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("count", [1, 2])
def test_a_port_held_by_another_server_is_refused(count: int) -> None:
    for held_by in (listen("127.0.0.1", 0, "API", 2), listen("127.0.0.1", 0, "API", 1)):
        port = held_by[0].getsockname()[1]
        try:
            with pytest.raises(SystemExit, match=f"the API cannot listen on 127.0.0.1:{port}: Address already in use"):
                listen("127.0.0.1", port, "API", count)
        finally:
            for s in held_by:
                s.close()
