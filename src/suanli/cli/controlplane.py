"""Registers the control-plane commands (server, login, gpus, nodes, instances,
launch, jobs) on a Typer app — one call from ``suanli.cli``, and tests can build
an app with only these commands."""

from __future__ import annotations

import typer

from suanli.cli import gpus, images, instances, jobs, keys, launch, login, nodes, server, slurm, ssh


def register(app: typer.Typer) -> None:
    app.command("server")(server.server)
    app.command("login")(login.login)
    app.command("gpus")(gpus.gpus)
    app.add_typer(nodes.app, name="nodes")
    app.add_typer(instances.app, name="instances")
    app.command("launch")(launch.launch)
    app.add_typer(jobs.app, name="jobs")
    app.add_typer(slurm.app, name="slurm")
    app.add_typer(images.app, name="images")
    app.add_typer(keys.app, name="keys")
    app.command("ssh")(ssh.ssh)
