"""``--secret NAME=VALUE`` / ``--secret NAME`` of ``suanli instances create`` and
``suanli launch``: the value is sealed by the server and shown masked everywhere after.

``--secret NAME`` takes the value from this shell's ``$NAME``, which keeps it out of the
process list (a ``NAME=VALUE`` argument is readable there by every user of this machine).
"""

from __future__ import annotations

import os
import re

import typer

HELP = "NAME=VALUE, or NAME to take $NAME from this shell (keeps the value out of `ps`); sealed by the server (repeatable)."
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse(items: list[str]) -> dict[str, str]:
    """name -> value; a bad name or a ``NAME`` unset here is refused, naming the name only."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not NAME.match(name):
            raise typer.BadParameter(f"{name!r} is not an environment variable name (NAME=VALUE or NAME)", param_hint="--secret")
        if not sep:
            if name not in os.environ:
                raise typer.BadParameter(
                    f"${name} is not set in this shell (NAME=VALUE, or export {name})", param_hint="--secret"
                )
            value = os.environ[name]
        out[name] = value
    return out
