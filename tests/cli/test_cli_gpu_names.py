"""One name per GPU: every command that takes a GPU model from a user resolves the
spellings people type (``a100``, ``h100``, ``4090``, ``910b``, the catalog's names, the
nodes' names, any case) through ``suanli.gpu_names`` to the same model, and an unknown
name is refused with the choices.

Parametrized over commands: the advisor's (no server; every alias of ``gpu_names``
means its catalog row) and the platform's (in-process CLI against the in-process
server with the demo inventory; a spelling means the model a node registered)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from suanli.cli import app
from suanli.gpu_names import ALIASES
from tests.control.control_helpers import Server

#: What people type for the demo inventory's GPUs -> (node model, catalog row).
PLATFORM = {
    "a100": ("A100-80G", "A100 80GB SXM4"),
    "A100": ("A100-80G", "A100 80GB SXM4"),
    "a100-80g": ("A100-80G", "A100 80GB SXM4"),
    "A100 80GB SXM4": ("A100-80G", "A100 80GB SXM4"),
    "h100": ("H100", "H100 SXM5 80GB"),
    "H100-SXM": ("H100", "H100 SXM5 80GB"),
    "4090": ("RTX4090", "RTX 4090"),
    "rtx4090": ("RTX4090", "RTX 4090"),
    "RTX 4090": ("RTX4090", "RTX 4090"),
    "910b": ("Ascend-910B", "Ascend 910B2"),
    "ascend-910b": ("Ascend-910B", "Ascend 910B2"),
}

#: Every alias of gpu_names, and the platform's spellings -> the catalog row meant.
CATALOG = {**ALIASES, **{k: row for k, (_, row) in PLATFORM.items()}}

runner = CliRunner()


def _advisor(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


def _demand(tmp: Path) -> Path:
    path = tmp / "demand.csv"
    path.write_text("hour,gpus\n" + "".join(f"{h},{2 + h % 3}\n" for h in range(48)))
    return path


#: advisor command -> (argv for a GPU name, the name it answered for, from its JSON)
ADVISOR: dict[str, tuple[Callable[[str, Path], list[str]], Callable[[dict], str]]] = {
    "advise time": (
        lambda g, _: ["advise", "time", "--model", "llama-2-7b", "--gpu", g, "--tokens", "1B", "--json"],
        lambda j: j["gpu"],
    ),
    "advise memory --gpu": (
        lambda g, _: ["advise", "memory", "--model", "llama-2-7b", "--gpu", g, "--json"],
        lambda j: j["on_gpu"]["gpu"],
    ),
    "advise cost": (lambda g, _: ["advise", "cost", "--gpu", g, "--hours", "10", "--json"], lambda j: j["gpu"]),
    "tco --model": (lambda g, _: ["tco", "--model", g, "--gpu-price", "200000", "--json"], lambda j: j["gpu_model"]),
    "plan --gpu": (lambda g, tmp: ["plan", "--gpu", g, "--demand", str(_demand(tmp)), "--json"], lambda j: j["gpu"]),
}


@pytest.mark.parametrize("command", list(ADVISOR))
def test_every_alias_means_one_catalog_gpu_in_every_advisor_command(command: str, tmp_path: Path) -> None:
    argv, answered = ADVISOR[command]
    seen = {}
    for spelling, row in CATALOG.items():
        code, out = _advisor(*argv(spelling, tmp_path))
        if code == 0:
            seen[spelling] = answered(json.loads(out))
        else:  # a GPU the market book does not price: the refusal names the GPU it resolved to
            assert row in out, (command, spelling, out)
            seen[spelling] = row
    assert seen == CATALOG, command
    code, out = _advisor(*argv("voodoo5", tmp_path))
    assert code == 2 and "unknown GPU model 'voodoo5'" in out and "H100 SXM5 80GB" in out, out  # the choices


def _task(tmp: Path, gpu: str) -> Path:
    path = tmp / f"task-{abs(hash(gpu))}.yaml"
    path.write_text(f"name: t\nresources: {{accelerators: '{gpu}:1'}}\nrun: 'true'\n")
    return path


def _instance(cli, server: Server, tmp: Path, gpu: str) -> str:  # type: ignore[no-untyped-def]
    return json.loads(cli("instances", "create", "--gpu", f"{gpu}:1", "--json"))["gpu_model"]


def _launch(cli, server: Server, tmp: Path, gpu: str) -> str:  # type: ignore[no-untyped-def]
    return json.loads(cli("launch", str(_task(tmp, gpu)), "--json"))["gpu_model"]


def _quote(cli, server: Server, tmp: Path, gpu: str) -> str:  # type: ignore[no-untyped-def]
    (line,) = json.loads(cli("quote", str(_task(tmp, gpu)), "--json"))["quotes"]
    return line["gpu_model"].split(" (")[0]  # "A100-80G (A100 80GB SXM4)": the node's name, the book's


def _grant(cli, server: Server, tmp: Path, gpu: str) -> str:  # type: ignore[no-untyped-def]
    server.post("/v1/tenants", {"name": "lab"})
    return json.loads(cli("grants", "add", "lab", "--max-gpus", "1", "--gpu", gpu, "--json"))["gpu_model"]


def _subscription(cli, server: Server, tmp: Path, gpu: str) -> str:  # type: ignore[no-untyped-def]
    """A subscription names the price book's model (the catalog's name): the node model it is."""
    server.post("/v1/tenants", {"name": "lab"})
    cli("topup", "lab", "10000000")
    row = json.loads(cli("subscriptions", "buy", "monthly", gpu, "1", "--tenant", "lab", "--json"))["gpu_model"]
    return next(node for node, catalog in PLATFORM.values() if catalog == row)


def _api_instance(cli, server: Server, tmp: Path, gpu: str) -> str:  # type: ignore[no-untyped-def]
    return server.post("/v1/instances", {"gpu_model": gpu, "gpu_count": 1}, expect=201).json()["gpu_model"]


#: platform command -> (what it answered for a spelling, the refusal of an unknown one)
PLATFORM_COMMANDS = {
    "instances create --gpu": (_instance, ("instances", "create", "--gpu", "voodoo5:1")),
    "launch": (_launch, None),
    "quote": (_quote, None),
    "grants add --gpu": (_grant, ("grants", "add", "lab", "--max-gpus", "1", "--gpu", "voodoo5")),
    "subscriptions buy": (_subscription, ("subscriptions", "buy", "monthly", "voodoo5", "1", "--tenant", "lab")),
    "POST /v1/instances": (_api_instance, None),
}


@pytest.mark.parametrize("command", list(PLATFORM_COMMANDS))
def test_every_spelling_means_the_registered_model_in_every_platform_command(
    command: str,
    server: Server,
    cli,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    answered, refusal = PLATFORM_COMMANDS[command]
    seen = {spelling: answered(cli, server, tmp_path, spelling) for spelling in PLATFORM}
    assert seen == {k: node for k, (node, _) in PLATFORM.items()}, command
    if refusal:
        out = cli(*refusal, code=1)
        assert "voodoo5" in out and ("A100-80G" in out or "A100 80GB SXM4" in out), out  # the choices
    elif command in ("launch", "quote"):
        args = ("launch", str(_task(tmp_path, "voodoo5"))) if command == "launch" else ("quote", str(_task(tmp_path, "voodoo5")))
        out = cli(*args, code=1)
        assert "voodoo5" in out and "A100-80G" in out, out


def test_prices_set_takes_every_spelling_for_one_book_entry(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    """``prices set a100 on-demand ...`` changes the book's ``A100 80GB SXM4``: no second entry."""
    before = json.loads(cli("prices", "list", "--json"))["book"]["gpus"]
    for i, (spelling, (_, row)) in enumerate(PLATFORM.items()):
        price = f"{10 + i}.25"
        cli("prices", "set", spelling, "on-demand", price)
        gpus = json.loads(cli("prices", "list", "--json"))["book"]["gpus"]
        assert [g["model"] for g in gpus] == [g["model"] for g in before], spelling
        assert next(g for g in gpus if g["model"] == row)["on_demand"].startswith(price), (spelling, row)
    cli("prices", "set", "h200", "on-demand", "30")  # a GPU no node has yet is priced under the catalog's name
    assert "H200 SXM 141GB" in [g["model"] for g in json.loads(cli("prices", "list", "--json"))["book"]["gpus"]]
    out = cli("prices", "set", "voodoo5", "on-demand", "1", code=1)
    assert "unknown GPU model 'voodoo5'" in out and "A100-80G" in out and "RTX 4090" in out, out
