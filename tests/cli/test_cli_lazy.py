"""The CLI imports a command's module only when that command runs (``suanli.cli``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.core import TyperCommand
from typer.testing import CliRunner

from suanli.cli import COMMANDS, app, load

HEAVY = ("numpy", "sqlalchemy", "fastapi", "suanli.sim", "suanli.advisor", "suanli.control", "cryptography")


def imported_by(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``suanli ARGV`` (it exits 0)."""
    code = (
        "import sys\nfrom suanli.cli import app\n"
        f"try:\n    app({list(argv)!r})\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "print('\\n'.join(sys.modules))"
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
    assert not [m for m in mods if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]


def test_an_unknown_command_is_refused_with_the_usage() -> None:
    result = CliRunner().invoke(app, ["nosuch"])
    assert result.exit_code == 2 and "No such command" in result.output
    assert isinstance(load("bill"), TyperCommand)
