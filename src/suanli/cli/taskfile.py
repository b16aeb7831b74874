"""Reading a task file on the renter's machine: shared by ``suanli launch`` and
``suanli quote``, checked locally so errors name the field path before anything is sent."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from suanli.control.task import Task
from suanli.errors import describe_validation


def load_task(path: Path) -> dict:
    """Parse and check a task file locally (errors name the field path); a
    relative ``workdir`` is resolved against the file's directory."""
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a task is a mapping with at least `run:`")
    try:
        Task.model_validate(doc)
    except ValidationError as exc:
        raise ValueError(f"{path}: {describe_validation(exc.errors())}") from None
    if doc.get("workdir"):
        doc["workdir"] = str((path.parent / str(doc["workdir"])).resolve())
    return doc
