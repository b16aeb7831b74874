"""``suanli images``: the catalog of images renters pick from (list; operators add, rm,
default), and ``build``, which makes a built-in image on this host from Debian's
packages when no registry can be reached."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from suanli.cli.remote import api_errors, client, err_console, print_json, table
from suanli.client import ApiError

if TYPE_CHECKING:
    from suanli.backends.local.imagebuild import Recipe

app = typer.Typer(help="Images renters can run: list them; operators add, remove and build them.", no_args_is_help=True)


def _yes(v: object) -> str:
    return "yes" if v else "-"


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the offered images (the default is used when a request names none)."""
    with api_errors():
        rows = client().images()
    if as_json:
        return print_json(rows)
    table(
        "Images",
        ["NAME", "DEFAULT", "PYTHON", "CUDA", "JUPYTERLAB", "SSHD", "PRESENT", "REF", "DESCRIPTION"],
        [
            [
                r["name"],
                _yes(r["default"]),
                r["contents"].get("python") or "-",
                r["contents"].get("cuda") or "-",
                _yes(r["contents"].get("jupyterlab")),
                _yes(r["contents"].get("sshd")),
                "?" if r.get("present") is None else _yes(r["present"]),
                r["ref"],
                r["description"],
            ]
            for r in rows
        ],
    )


@app.command("add")
def add(
    name: str = typer.Argument(..., help="What renters write in --image, e.g. pytorch-2.4."),
    ref: str = typer.Option(..., "--ref", help="The engine's reference, e.g. registry.example.com/pytorch:2.4-cuda12.4."),
    description: str = typer.Option("", "--description", help="One line shown in the listing."),
    default: bool = typer.Option(False, "--default", help="Use it when a request names no image."),
    python: str = typer.Option(None, "--python", help="Python version inside, e.g. 3.11."),
    cuda: str = typer.Option(None, "--cuda", help="CUDA version inside, e.g. 12.4."),
    sshd: bool = typer.Option(False, "--sshd", help="It has OpenSSH's sshd (ssh, scp, sftp)."),
    jupyterlab: bool = typer.Option(False, "--jupyterlab", help="It has JupyterLab."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Offer an image (operators)."""
    contents = {"python": python, "cuda": cuda, "jupyterlab": jupyterlab, "sshd": sshd}
    with api_errors():
        row = client().add_image(name, ref, description, contents, default)
    if as_json:
        return print_json(row)
    typer.echo(f"added image {row['name']} = {row['ref']}{' (default)' if row['default'] else ''}")


@app.command("default")
def set_default(name: str, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Make NAME the default image (operators)."""
    with api_errors():
        row = client().set_default_image(name)
    if as_json:
        return print_json(row)
    typer.echo(f"{row['name']} is the default image")


@app.command("rm")
def rm(name: str, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Stop offering an image (operators); refused while an instance uses it. The
    engine's copy of the image is kept."""
    with api_errors():
        row = client().remove_image(name)
    if as_json:
        return print_json(row)
    typer.echo(f"removed image {row['name']}")


@app.command("build")
def build(
    names: list[str] = typer.Argument(..., help="Built-in images to build: python, tiny, jupyter, verify."),
    engine: str | None = typer.Option(None, "--engine", help="podman or docker [default: the one this host has]."),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Keeps the downloaded .debs under cache/ [default: ./.suanli or $SUANLI_DATA_DIR]."
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the engine has it."),
    register: bool = typer.Option(
        True, "--register/--no-register", help="Offer it in the catalog of the signed-in server, when one answers."
    ),
) -> None:
    """Build built-in images on this host from Debian's packages (no registry needed),
    showing the build's progress; already present ones are kept. Needs root."""
    from suanli.backends.local import imagebuild

    unknown = [n for n in names if n not in imagebuild.RECIPES]  # the input first: the same answer on any host
    if unknown:
        raise typer.BadParameter(f"no recipe {', '.join(unknown)}; recipes: {', '.join(imagebuild.RECIPES)}", param_hint="NAMES")
    engine = engine or imagebuild.detect_engine()
    if not engine:
        err_console.print("[red]error[/red]: no container engine here: install podman (scripts/images does)")
        raise typer.Exit(1)
    cache = (data_dir or Path(os.environ.get("SUANLI_DATA_DIR", ".suanli"))) / "cache" / "debootstrap"
    for name in names:
        try:
            result = imagebuild.build(name, engine, progress=lambda line: typer.echo(f"  {line}"), cache_dir=cache, force=force)
        except imagebuild.BuildError as exc:
            err_console.print(f"[red]error[/red]: building {name} failed: {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        verb = "already present" if result.how == "present" else f"built in {result.seconds:.1f} s"
        typer.echo(f"{name}: {result.ref} {verb}")
        if register:
            _register(imagebuild.RECIPES[name])


def _register(r: Recipe) -> None:
    """Add the built recipe to the server's catalog when it is not there; a missing
    server or role only earns a note (the server seeds the built-ins on start)."""
    try:
        c = client()
        rows = c.images()
        if any(row["name"] == r.name for row in rows):
            typer.echo(f"{r.name}: in the catalog")
            return
        default = r.default and not any(row["default"] for row in rows)
        c.add_image(r.name, r.ref, r.description, r.contents, default)
        typer.echo(f"{r.name}: added to the catalog{' as the default' if default else ''}")
    except ApiError as exc:
        if exc.code == "unreachable":
            typer.echo(f"{r.name}: no server answers; a server offers the built-in images when it starts")
        else:
            typer.echo(f"{r.name}: not added to the catalog ({exc.code}: {exc.message})")
