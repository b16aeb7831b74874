"""What a renter gets in the web console, in a real browser against a real server: the
image picked from the catalog, published ports as links through the port proxy (the
console's token traded for the proxy's cookie, never seen by the service), the runtime
said plainly ("process (no isolation)"), SSH keys added and removed (a private key never
leaves the page), and on a container-runtime server the ssh command that really opens
the instance."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from playwright.sync_api import Page, expect

from tests import http_helpers as web
from tests.console.console_helpers import container_live_server, new_context
from tests.control.control_helpers import LiveServer, free_port, wait_until

pytestmark = pytest.mark.browser

SSH_OPTS = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "BatchMode=yes",
    "-o",
    "ConnectTimeout=5",
    "-o",
    "LogLevel=ERROR",
]


def sign_in(page: Page, token: str) -> None:
    page.goto("/")
    page.fill("#login input[name=token]", token)
    page.click("#login button")
    expect(page.locator("#tabs")).to_be_visible()


def row(page: Page, text: str):  # type: ignore[no-untyped-def]
    return page.locator("#live tbody tr", has_text=text)


def keypair(tmp_path: Path, name: str) -> tuple[Path, str, str]:
    """(private key path, public key line, SHA256 fingerprint) from the real ssh-keygen."""
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@laptop", "-f", str(path)], check=True)
    listed = subprocess.run(["ssh-keygen", "-lf", f"{path}.pub"], capture_output=True, text=True, check=True).stdout
    return path, Path(f"{path}.pub").read_text().strip(), listed.split()[1]


def api_calls(page: Page, method: str, path: str) -> list[str]:
    """Every request of ``method`` to ``path`` the page makes from now on (to prove none was sent)."""
    seen: list[str] = []
    page.on("request", lambda r: r.method == method and r.url.split("?")[0].endswith(path) and seen.append(r.url))
    return seen


def via_loopback(url: str) -> tuple[str, dict[str, str]]:
    """A port's URL (``http://ID-PORT.localhost:N/``) for httpx: this machine's resolver does
    not map ``*.localhost`` (Chromium does), so 127.0.0.1's URL and the port's ``Host``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"127.0.0.1:{parts.port}")), {"Host": parts.netloc}


# -- SSH keys -------------------------------------------------------------------------------


def test_add_refuse_and_remove_ssh_keys(page: Page, console_server: LiveServer, tmp_path: Path) -> None:
    priv, pub, fp = keypair(tmp_path, "renter")
    sign_in(page, console_server.token)
    page.click("a[href='#keys']")
    expect(page.locator("#live")).to_contain_text("No SSH keys yet")
    posts = api_calls(page, "POST", "/v1/keys")
    form = page.locator("#add-key")
    text = form.locator("textarea[name=public_key]")

    text.fill(priv.read_text())  # the private key by mistake: it never leaves the page
    form.get_by_role("button", name="Add key").click()
    expect(page.locator("#flash")).to_contain_text("looks like a PRIVATE key; nothing was sent or stored")
    expect(text).to_have_value("")
    assert posts == [] and console_server.client().request("GET", "/v1/keys") == []

    text.fill("ssh-ed25519 not-base64 x@y")  # the server's refusal, shown as the server words it
    form.get_by_role("button", name="Add key").click()
    said = web.post(
        console_server.url + "/v1/keys",
        json={"public_key": "ssh-ed25519 not-base64 x@y"},
        headers={"Authorization": f"Bearer {console_server.token}"},
    ).json()["error"]
    expect(page.locator("#flash")).to_have_text(f"{said['message']} ({said['code']})")
    assert len(posts) == 1 and console_server.client().request("GET", "/v1/keys") == []

    form.locator("input[type=file]").set_input_files(f"{priv}.pub")  # read from the .pub file
    expect(text).to_have_value(pub + "\n")
    form.locator("input[name=name]").fill("laptop")
    form.get_by_role("button", name="Add key").click()
    expect(page.locator("#flash")).to_contain_text("Key added")
    key = row(page, "laptop")
    expect(key).to_contain_text("ssh-ed25519")
    expect(key).to_contain_text(fp)  # as `ssh-keygen -lf` prints it
    expect(text).to_have_value("")
    [stored] = console_server.client().request("GET", "/v1/keys")
    assert stored["fingerprint"] == fp and stored["name"] == "laptop"

    page.once("dialog", lambda d: d.accept())
    key.get_by_role("button", name="Remove").click()
    expect(key).to_have_count(0)
    expect(page.locator("#live")).to_contain_text("No SSH keys yet")
    assert console_server.client().request("GET", "/v1/keys") == []


# -- renting with an image and ports (process runtime: no images needed) ----------------------


class Recorder(BaseHTTPRequestHandler):
    """A renter's web service on the host port (the process runtime publishes a port as
    itself): it says hello and records what reached it."""

    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        type(self).seen.append((self.path, self.headers.get("Cookie", "") + "|" + self.headers.get("Authorization", "")))
        body = f"hello from the renter's service at {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[tuple[int, list[tuple[str, str]]]]:
    port = free_port()
    Recorder.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield port, Recorder.seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_rent_with_an_image_and_a_port_then_open_it(
    page: Page, console_server: LiveServer, service: tuple[int, list[tuple[str, str]]]
) -> None:
    port, seen = service
    catalog = console_server.client().request("GET", "/v1/images")
    default = next(i for i in catalog if i["default"])
    sign_in(page, console_server.token)
    page.click("a[href='#instances']")
    form = page.locator("#create-instance")
    image = form.locator("select[name=image]")
    expect(image).to_have_value(default["name"])  # the catalog's default, preselected
    for im in catalog:
        expect(image.locator(f"option[value='{im['name']}']")).to_contain_text(im["description"])
    assert default["contents"]["sshd"] and default["contents"]["python"]
    tags = page.locator("#image-contents .tag")
    expect(tags).to_contain_text([f"Python {default['contents']['python']}", "sshd"])
    other = next(i for i in catalog if not i["default"])
    image.select_option(other["name"])
    expect(tags).to_have_count(sum(bool(v) for v in other["contents"].values()))
    image.select_option(default["name"])

    form.locator("input[name=name]").fill("web-box")
    form.locator("select[name=gpu_model]").select_option("RTX4090")
    form.locator("input[name=ports]").fill(f" {port} ")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_have_text("Instance requested.")
    box = row(page, "web-box")
    expect(box.locator(".state")).to_have_text("running")
    [inst] = console_server.client().instances()
    assert inst["image"] == default["name"] and inst["runtime"] == "process" and inst["ssh"] is None
    url = inst["ports"][str(port)]
    assert url == f"http://{inst['id']}-{port}.localhost:{console_server.proxy_port}/"  # an origin of its own
    expect(box).to_contain_text(default["name"])
    runtime = box.locator("[data-runtime]")
    expect(runtime).to_have_text("process (no isolation)")
    expect(runtime).to_have_class("warn runtime")
    expect(box).to_contain_text("no SSH (process runtime)")

    link = box.locator(f"a[data-port='{port}']")
    expect(link).to_have_attribute("href", url)  # the plain URL: copying the link shares no token
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    bare, host = via_loopback(url)
    assert web.get(bare, headers=host).status_code == 401  # opened bare, the proxy wants credentials
    with page.context.expect_page() as opened:
        link.click()
    tab = opened.value
    tab.wait_for_load_state()
    expect(tab.locator("body")).to_have_text("hello from the renter's service at /")
    assert tab.url == url  # the proxy dropped ?token= and redirected before relaying anything
    pages = lambda: [s for s in seen if s[0] != "/favicon.ico"]  # noqa: E731 - the origin's icon, the browser's own ask
    assert pages() == [("/", "|")], seen  # the service never saw the token: not in the path, a cookie or a header
    tab.reload()  # the proxy's own cookie carries on
    expect(tab.locator("body")).to_have_text("hello from the renter's service at /")
    assert len(pages()) == 2 and "sl_" not in json.dumps(seen) and "suanli_proxy" not in json.dumps(seen)
    [cookie] = tab.context.cookies(url)
    assert (cookie["name"], cookie["domain"], cookie["path"], cookie["httpOnly"]) == (
        "suanli_proxy",
        f"{inst['id']}-{port}.localhost",
        "/",
        True,
    )  # host-only: no other port gets it
    assert console_server.token not in cookie["value"]  # a pass for this port, not the console's token
    tab.close()


def test_bad_ports_are_refused_in_the_page_and_nothing_is_created(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#instances']")
    posts = api_calls(page, "POST", "/v1/instances")
    form = page.locator("#create-instance")
    ports = form.locator("input[name=ports]")
    form.locator("input[name=name]").fill("bad-ports")
    for text, said in [
        ("8888, abc", 'Ports: "abc" is not a TCP port (1 to 65535)'),
        ("8888 6006", 'Ports: "8888 6006" is not a TCP port'),
        ("70000", 'Ports: "70000" is not a TCP port'),
        ("8888,", 'Ports: "" is not a TCP port'),
        ("8888, 8888", "Ports: 8888 is listed twice"),
    ]:
        ports.fill(text)
        form.locator("button[type=submit]").click()
        expect(page.locator("#flash")).to_contain_text(said)
        expect(page.locator("#flash")).to_contain_text("Nothing was sent.")
        expect(ports).to_have_attribute("aria-invalid", "true")
    assert posts == [] and console_server.client().instances() == []
    ports.fill("8888, 6006")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_have_text("Instance requested.")
    expect(ports).not_to_have_attribute("aria-invalid", "true")
    [inst] = console_server.client().instances()
    assert sorted(inst["ports"]) == ["6006", "8888"] and len(posts) == 1


# -- images (operators) -------------------------------------------------------------------------


def test_operators_curate_images_and_members_only_read_them(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#images']")
    form = page.locator("#add-image")
    form.locator("input[name=name]").fill("<b>torch</b>")  # refused by the server, shown as text
    form.locator("input[name=ref]").fill("localhost/suanli/python:3.11")
    form.get_by_role("button", name="Offer image").click()
    expect(page.locator("#flash")).to_contain_text("(invalid)")
    assert page.locator("#live b").count() == 0
    form.locator("input[name=name]").fill("torch")
    form.locator("input[name=description]").fill("PyTorch 2.4 with CUDA 12.4")
    form.locator("input[name=python]").fill("3.11")
    form.locator("input[name=cuda]").fill("12.4")
    form.locator("input[name=jupyterlab]").check()
    form.get_by_role("button", name="Offer image").click()
    expect(page.locator("#flash")).to_have_text("Image torch offered.")
    torch = row(page, "torch")
    expect(torch.locator(".tag")).to_have_text(["Python 3.11", "CUDA 12.4", "JupyterLab"])
    added = next(i for i in console_server.client().request("GET", "/v1/images") if i["name"] == "torch")
    assert added["contents"] == {"python": "3.11", "cuda": "12.4", "jupyterlab": True, "sshd": False}
    page.once("dialog", lambda d: d.accept())
    torch.get_by_role("button", name="Remove").click()
    expect(torch).to_have_count(0)
    assert "torch" not in [i["name"] for i in console_server.client().request("GET", "/v1/images")]

    admin = console_server.client()
    admin.create_tenant("lab")
    admin.topup("lab", "1000")  # prepaid: a new tenant rents nothing without a balance
    member = admin.create_user("renter", role="member", tenant="lab")
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, member["token"])
    page.click("a[href='#images']")
    expect(row(page, "python")).to_contain_text("default")
    assert page.locator("#add-image").count() == 0
    assert page.get_by_role("button", name="Remove").count() == 0


# -- a container-runtime server: the ssh command opens the instance ------------------------------


@pytest.fixture
def container_server(tmp_path: Path) -> Iterator[LiveServer]:
    with container_live_server(tmp_path, "python") as srv:
        yield srv


@pytest.mark.containers
def test_a_container_instance_shows_an_ssh_command_that_works(
    chromium,
    container_server: LiveServer,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    srv = container_server
    context = new_context(chromium, srv.url)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=srv.url)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        priv, pub, _ = keypair(tmp_path, "renter")
        sign_in(page, srv.token)
        page.click("a[href='#keys']")
        page.locator("#add-key textarea[name=public_key]").fill(pub)
        page.locator("#add-key").get_by_role("button", name="Add key").click()
        expect(page.locator("#flash")).to_contain_text("Key added")

        page.click("a[href='#instances']")
        form = page.locator("#create-instance")
        expect(form.locator("select[name=image]")).to_have_value("python")
        form.locator("input[name=name]").fill("ssh-box")
        form.locator("select[name=gpu_model]").select_option("H100")
        form.locator("input[name=disk_gib]").fill("2")
        form.locator("input[name=ports]").fill("8888")
        form.locator("button[type=submit]").click()
        expect(page.locator("#flash")).to_have_text("Instance requested.")
        box = row(page, "ssh-box")
        # a container with sshd: seconds on a loaded machine, past expect's own 5 s default
        # (the page's 60 s above does not apply to expect)
        expect(box.locator(".state")).to_have_text("running", timeout=60_000)
        expect(box.locator("[data-runtime]")).to_contain_text("container")
        expect(box.locator("[data-runtime]")).not_to_contain_text("no isolation")
        ssh = box.locator(".ssh code")
        expect(ssh).to_have_text(re.compile(r"^ssh -p \d+ root@127\.0\.0\.1 -i KEYFILE$"))
        [inst] = srv.client().instances()
        shown = ssh.inner_text()
        assert shown == inst["ssh"] + " -i KEYFILE" and inst["runtime"] == "container"
        box.locator(".ssh").get_by_role("button", name="Copy").click()
        expect(page.locator("#flash")).to_have_text("Copied: " + shown)
        assert page.evaluate("navigator.clipboard.readText()") == shown

        # the command as shown, the key file filled in: plain OpenSSH lands in the container
        argv = (
            [str(priv) if a == "KEYFILE" else a for a in shlex.split(shown)] + SSH_OPTS + ["echo $(cat /etc/hostname) $(id -u)"]
        )
        done = wait_until(
            lambda: (r := subprocess.run(argv, capture_output=True, text=True, timeout=30)).returncode == 0 and r, 30
        )
        assert done.stdout.split() == [f"instance-{inst['id']}", "0"], done.stdout

        # its port through the proxy: a service started in the instance, opened from the console
        started = srv.client().exec(
            inst["id"],
            "echo hello-from-the-container > /workspace/hello.txt; "
            "cd /workspace && setsid python3 -m http.server 8888 > /dev/null 2>&1 < /dev/null &",
            30,
        )
        assert started["exit_code"] == 0, started
        auth = {"Authorization": f"Bearer {srv.token}"}
        base, host = via_loopback(inst["ports"]["8888"])
        wait_until(lambda: web.get(base + "hello.txt", headers={**host, **auth}).status_code == 200, 20)
        link = box.locator("a[data-port='8888']")
        expect(link).to_have_attribute("href", inst["ports"]["8888"])
        with context.expect_page() as opened:
            link.click()
        tab = opened.value
        tab.wait_for_load_state()
        assert tab.url == inst["ports"]["8888"]
        expect(tab.locator("body")).to_contain_text("hello.txt")  # the directory listing of /workspace
        tab.goto(inst["ports"]["8888"] + "hello.txt")
        expect(tab.locator("body")).to_have_text("hello-from-the-container")
    finally:
        context.close()
