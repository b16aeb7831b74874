"""Advisor test fixtures.

``suanli.cli`` imports every command group, including ``suanli.cli.sim`` which another
engineer owns. Until that module exists, register an empty stand-in so the advisor's CLI
can be tested on its own; once it lands this does nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import typer

_CLI_DIR = Path(importlib.util.find_spec("suanli").origin).parent / "cli"  # type: ignore[arg-type]
_HAS_SIM = (_CLI_DIR / "sim.py").exists() or (_CLI_DIR / "sim" / "__init__.py").exists()
if not _HAS_SIM:  # pragma: no cover - transitional
    stub = types.ModuleType("suanli.cli.sim")
    stub.app = typer.Typer(help="(sim CLI not installed)")  # type: ignore[attr-defined]
    sys.modules["suanli.cli.sim"] = stub
