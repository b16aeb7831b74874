"""``suanli ssh ID [-i KEYFILE] [-- CMD...]``: the real OpenSSH client into an instance.

The server says how to reach the instance (its ``ssh`` field, a complete command
line); this adds the key and a known-hosts file of its own per server, with the
host key pinned by instance (``HostKeyAlias``) rather than by the 127.0.0.1 port,
which a later instance may reuse. The exit code is ssh's: the remote command's,
or 255 when ssh itself fails.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import typer

from suanli.cli.remote import api_errors, client, err_console
from suanli.client import ApiError, config_path


def ssh_argv(
    ssh_field: str, keyfile: str | None, known_hosts: Path | str, command: list[str] | None, host_alias: str | None = None
) -> list[str]:
    """The argv to run: the server's ``ssh`` line with the key and host-key options put
    right after the program name (before the destination), and ``-- CMD`` at the end."""
    parts = shlex.split(ssh_field)
    if not parts or Path(parts[0]).name != "ssh":
        raise ValueError(f"not an ssh command line: {ssh_field!r}")
    opts: list[str] = []
    if keyfile:
        opts += ["-i", str(keyfile), "-o", "IdentitiesOnly=yes"]  # the agent's other keys would only use up MaxAuthTries
    opts += ["-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={known_hosts}"]
    if host_alias:
        opts += ["-o", f"HostKeyAlias={host_alias}"]
    return [parts[0], *opts, *parts[1:], *(["--", *command] if command else [])]


def known_hosts_file(server_url: str) -> Path:
    """``<config dir>/known_hosts/<server>``: one per server, kept apart from ~/.ssh/known_hosts."""
    slug = re.sub(r"[^A-Za-z0-9.-]+", "_", re.sub(r"^[a-z]+://", "", server_url)).strip("_") or "server"
    path = config_path().parent / "known_hosts" / slug
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _fail(message: str) -> None:
    err_console.print(f"[red]error[/red]: {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def ssh(
    instance_id: int = typer.Argument(..., help="The instance's ID."),
    command: list[str] = typer.Argument(None, help="After --: a command to run instead of a login shell."),
    identity: str = typer.Option(
        None, "-i", "--identity", help="Private key file, e.g. ~/.ssh/id_ed25519; without it ssh tries the agent and ~/.ssh/id_*."
    ),
) -> None:
    """SSH into a running instance (plain OpenSSH), or run CMD there: suanli ssh 7 -- nvidia-smi."""
    api = client()
    with api_errors():
        inst = api.instance(instance_id)
    if inst.get("state") != "running":
        _fail(
            f"instance {instance_id} is {inst.get('state')}; ssh needs a running instance"
            + (f" (suanli instances start {instance_id})" if inst.get("state") in ("stopped", "failed", "preempted") else "")
        )
    if not inst.get("ssh"):
        if str(inst.get("runtime", "")).startswith("process"):
            _fail(
                f"instance {instance_id} runs as a bare process (runtime: process, no isolation), which has no SSH; "
                f"use: suanli instances exec {instance_id} CMD"
            )
        _fail(
            f"instance {instance_id} has no SSH: its image ({inst.get('image')}) has no sshd; "
            "pick one that has (suanli images list)"
        )
    keyfile = None
    if identity:
        path = Path(identity).expanduser()
        if path.suffix == ".pub":
            _fail(f"-i takes the private key; {identity} is the public one (try -i {path.with_suffix('')})")
        if not path.is_file():
            _fail(f"{identity}: no such key file")
        keyfile = str(path)
    try:
        registered: list | None = api.keys()
    except ApiError:  # only a hint: an older server without /v1/keys should not block ssh
        registered = None
    if registered == []:
        _fail("you have no SSH key registered, so no instance accepts yours: suanli keys add ~/.ssh/id_ed25519.pub")
    if shutil.which("ssh") is None:
        _fail("the OpenSSH client (ssh) is not installed here (Debian: apt install openssh-client)")
    argv = ssh_argv(inst["ssh"], keyfile, known_hosts_file(api.url), command or None, host_alias=f"suanli-instance-{instance_id}")
    raise typer.Exit(run(argv))


def run(argv: list[str]) -> int:
    """Run ssh in the foreground and return its exit code (128+N when signal N ended it).
    Ctrl-C reaches ssh too (same process group): ssh decides, we keep waiting for it."""
    proc = subprocess.Popen(argv)
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            continue
    return 128 - code if code < 0 else code
