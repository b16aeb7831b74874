"""The CLI imports a command's module only when that command runs (``suanli.cli``), and a
command that only talks to the server loads no heavy library (issue 18: the CLI starts at
once; ``bench/cli_start.py`` times it)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.core import TyperCommand
from typer.testing import CliRunner

from suanli.cli import COMMANDS, app, load
from tests.control.control_helpers import LiveServer

#: what no server-talking command may import: the numeric and web stacks, the database,
#: the control plane and the packages that need them, and what only httpx's own CLI uses
HEAVY = (
    "numpy",
    "scipy",
    "pandas",
    "matplotlib",
    "ortools",
    "sqlalchemy",
    "fastapi",
    "starlette",
    "uvicorn",
    "cryptography",
    "yaml",
    "pygments",
    "markdown_it",
    "click",
    "httpx._main",
    "suanli.sim",
    "suanli.scheduler",
    "suanli.advisor",
    "suanli.control",
    "suanli.billing",
    "suanli.db",
    "suanli.api",
    "suanli.backends",
    "suanli.inventory",
)

#: commands people run that only read from the server, each run for real against one
SERVER_COMMANDS = [
    "gpus",
    "instances list",
    "jobs list",
    "nodes list",
    "bill",
    "usage",
    "prices list",
    "grants list",
    "subscriptions list",
    "tenants list",
    "users list",
    "tokens list",
    "keys list",
    "images list",
    "audit list",
]


def imported_by(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``suanli ARGV`` (it exits 0)."""
    code = (
        "import sys\nfrom suanli.cli import app\n"
        f"try:\n    app({list(argv)!r})\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "print('\\n'.join(m for m, v in sys.modules.items() if v is not None))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_help_table_says_what_each_command_says(name: str) -> None:
    assert load(name).get_short_help_str(500) == COMMANDS[name].help


def test_help_lists_every_command_and_imports_none_of_them() -> None:
    mods = imported_by("--help")
    assert not [m for m in mods if m.startswith("suanli.cli.") and m != "suanli.cli"], "--help imported a command module"
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "300"}).output
    for name, entry in COMMANDS.items():
        assert name in out and entry.help[:40] in out


def test_a_remote_command_imports_no_heavy_library() -> None:
    mods = imported_by("instances", "--help")
    assert "suanli.cli.instances" in mods and "httpx" in mods
    help_text = ("markdown_it", "pygments")  # Rich renders the help with them
    assert not [m for m in heavy(sorted(mods)) if not m.startswith(help_text)]


def heavy(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY)))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("lazy") / "data", options={"runtime": "process"}).start()
    yield srv
    srv.close()


def test_commands_that_talk_to_the_server_import_no_heavy_library(server: LiveServer) -> None:
    """One fresh interpreter runs each command in turn against a real server; after each,
    the modules it added. A heavy import is charged to the first command that made it."""
    code = (
        "import json, sys\nfrom suanli.cli import app\nseen = {m for m, v in sys.modules.items() if v is not None}\nout = {}\n"
        f"for cmd in {SERVER_COMMANDS!r}:\n"
        "    try:\n        app(cmd.split())\n    except SystemExit as e:\n        assert e.code in (0, None), (cmd, e.code)\n"
        "    now = {m for m, v in sys.modules.items() if v is not None}\n    out[cmd] = sorted(now - seen)\n    seen = now\n"
        "print('@@' + json.dumps(out))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=server.cli_env())
    assert done.returncode == 0, done.stderr[-3000:]
    added = json.loads(done.stdout.rsplit("@@", 1)[1])
    assert list(added) == SERVER_COMMANDS
    assert "httpx" in added["gpus"] and "suanli.cli.gpus" in added["gpus"]  # it did run, and talked HTTP
    offenders = {cmd: heavy(mods) for cmd, mods in added.items() if heavy(mods)}
    assert not offenders, f"heavy imports of commands that only talk to the server: {offenders}"


#: what ``launch`` may load of HEAVY: it reads a YAML task file and checks it with the
#: model the server checks it with (``control.task``), whose rules are on text alone
LAUNCH_NEEDS = ("yaml", "suanli.control", "suanli.billing.money")
CHECKS = ["suanli.control.pipeline_plan", "suanli.control.secret_names", "suanli.control.task", "suanli.control.volume_paths"]


def test_launch_checks_its_task_file_without_loading_the_database_layer(server: LiveServer, tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("name: lazy\nrun: echo hi\n")
    code = (
        "import sys\nfrom suanli.cli import app\n"
        f"try:\n    app(['launch', {str(task)!r}, '--secret', 'TOKEN=x', '--json'])\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "print('@@' + ' '.join(m for m, v in sys.modules.items() if v is not None))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=server.cli_env())
    assert done.returncode == 0 and '"state": "queued"' in done.stdout, done.stdout + done.stderr[-3000:]
    mods = sorted(done.stdout.rsplit("@@", 1)[1].split())
    loaded = heavy(mods)
    assert not [m for m in loaded if not m.startswith(LAUNCH_NEEDS) and m != "suanli.billing"], loaded
    assert [m for m in loaded if m.startswith("suanli.control.")] == CHECKS, loaded  # no more of the control plane


def test_the_heavy_check_catches_a_heavy_import() -> None:
    """The check above is not vacuous: the simulator's commands load NumPy and the scheduler."""
    mods = imported_by("sim", "--help")
    assert {"numpy", "suanli.sim", "suanli.scheduler"} <= set(heavy(sorted(mods)))


def test_sim_fill_does_not_load_the_replay() -> None:
    mods = imported_by("sim", "fill", "--help")
    assert "suanli.sim.fill" in mods and "suanli.sim.replay" not in mods


def test_an_unknown_command_is_refused_with_the_usage() -> None:
    result = CliRunner().invoke(app, ["nosuch"])
    assert result.exit_code == 2 and "No such command" in result.output
    assert isinstance(load("bill"), TyperCommand)
