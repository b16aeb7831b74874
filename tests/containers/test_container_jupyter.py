"""JupyterLab on the ``jupyter`` image, started with the instance behind the port proxy at
``/`` of its port's own host: the page loads and a kernel runs code over the proxied
WebSocket. (The tests connect to 127.0.0.1 with the port's ``Host``: this machine's
resolver does not map ``*.localhost``, browsers do.)"""

from __future__ import annotations

import json
import socket
import uuid

import httpx
import pytest

from suanli.backends.local import imagebuild
from tests import http_helpers as web
from tests.containers.test_container_ports import via_loopback
from tests.control.control_helpers import LiveServer, wait_until


@pytest.fixture
def jupyter_image(images: list[str]) -> None:
    imagebuild.pull_or_build("jupyter", "podman")


def test_jupyterlab_runs_a_kernel_through_the_proxy(jupyter_image: None, live: LiveServer) -> None:
    from websockets.sync.client import connect

    c = live.client()
    inst = c.create_instance(gpu_milli=500, image="jupyter", ports=[8888])
    wait_until(lambda: c.instance(inst["id"])["state"] == "running", 60)
    url = c.instance(inst["id"])["ports"]["8888"]
    assert url == f"http://{inst['id']}-8888.localhost:{live.proxy_port}/"
    base, host = via_loopback(url)
    auth = {"Authorization": f"Bearer {live.token}"}
    with web.client(base_url=base, headers={**host, **auth}) as client:
        page = wait_until(lambda: _get(client, "lab"), 60)
        assert "JupyterLab" in page.text and '"baseUrl": "/"' in page.text
        xsrf = client.cookies.get("_xsrf")
        kernel = client.post("api/kernels", headers={"X-XSRFToken": xsrf or ""}, json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
    assert web.get(base + "lab", headers=host).status_code == 401  # Jupyter has no token of its own: the proxy is the door
    with web.client(base_url=base, headers=host) as browser:  # a browser: the link's token, then the pass alone
        assert browser.get(f"lab?token={live.token}").status_code == 307
        assert "JupyterLab" in browser.get("lab").text
        api = browser.get("api/kernels")
        assert api.status_code == 200 and kernel.json()["id"] in {k["id"] for k in api.json()}
        cookies = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
    # the kernel's socket as JupyterLab's page opens it: the pass cookie, from the port's own origin
    sock = socket.create_connection(("127.0.0.1", live.proxy_port))
    with connect(
        url.replace("http://", "ws://") + f"api/kernels/{kernel.json()['id']}/channels",
        sock=sock,
        origin=url.rstrip("/"),
        additional_headers={"Cookie": cookies},
        proxy=None,
    ) as ws:
        ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": uuid.uuid4().hex,
                        "username": "t",
                        "session": uuid.uuid4().hex,
                        "msg_type": "execute_request",
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "channel": "shell",
                    "buffers": [],
                    "content": {
                        "code": "import os; print(6 * 7, os.getcwd())",
                        "silent": False,
                        "store_history": False,
                        "user_expressions": {},
                        "allow_stdin": False,
                    },
                }
            )
        )
        out = wait_until(lambda: (m := json.loads(ws.recv(timeout=30))).get("msg_type") == "stream" and m, 60, 0)
    assert out["content"]["text"] == "42 /workspace\n"


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        r = client.get(url)
    except httpx.TransportError:
        return None
    return r if r.status_code == 200 else None
