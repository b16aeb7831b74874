"""Reading a task file on the renter's machine: shared by ``suanli launch`` and
``suanli quote``, checked locally so errors name the field path before anything is sent.
A file with ``jobs:`` is a pipeline (``load_pipeline``)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from suanli.control.pipeline_plan import plan
from suanli.control.task import Pipeline, Task
from suanli.errors import Invalid, describe_validation


def _doc(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None


def _resolve_workdir(path: Path, task: dict) -> None:
    if task.get("workdir"):
        task["workdir"] = str((path.parent / str(task["workdir"])).resolve())


def parse_sweeps(items: list[str]) -> dict[str, list[str]]:
    """``--sweep KEY=v1,v2`` (repeatable) as a task's ``matrix``; ValueError on an empty
    value or a key given twice."""
    matrix: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--sweep: expected KEY=V1,V2,..., got {item!r}")
        if key in matrix:
            raise ValueError(f"--sweep: {key} is given twice (one --sweep per key, its values comma-separated)")
        parts = [v.strip() for v in values.split(",")]
        if any(not v for v in parts):
            raise ValueError(f"--sweep {key}: an empty value in {values!r}")
        matrix[key] = parts
    return matrix


def load_pipeline(path: Path, sweeps: dict[str, list[str]] | None = None) -> tuple[str, list[dict], bool]:
    """Parse and check a task or pipeline file locally, with ``sweeps`` added to a
    single task's matrix: its name (the group), its jobs, each with a relative
    ``workdir`` resolved against the file's directory, and whether it is a pipeline
    (``jobs:``, even of one job) or a sweep: several jobs, listed as a list. The graph (names, cycles,
    sweeps) is checked with the server's rules (``control.pipeline_plan``): nothing is
    uploaded for a file the server would refuse."""
    doc = _doc(path)
    if isinstance(doc, dict) and "jobs" in doc:
        if sweeps:
            raise ValueError(f"{path}: --sweep applies to a one-task file; in a pipeline, give the job a `matrix:`")
        try:
            pipeline = Pipeline.model_validate(doc)
        except ValidationError as exc:
            raise ValueError(f"{path}: {describe_validation(exc.errors())}") from None
        jobs = [dict(j) for j in doc["jobs"]]
        name = pipeline.name or path.stem
        tasks = pipeline.jobs
        many = True
    else:
        task = load_task(path)
        if sweeps:
            clash = sorted(set(sweeps) & set(task.get("matrix") or {}))
            if clash:
                raise ValueError(f"{path}: --sweep {clash[0]} is in the file's matrix already")
            task["matrix"] = {**(task.get("matrix") or {}), **sweeps}
        try:
            tasks = [Task.model_validate(task)]
        except ValidationError as exc:
            raise ValueError(f"{path}: {describe_validation(exc.errors())}") from None
        jobs, name = [task], (task.get("name") or "")
        many = bool(task.get("matrix"))
    try:
        plan(tasks)
    except Invalid as exc:
        raise ValueError(f"{path}: {exc.message}") from None
    for j in jobs:
        _resolve_workdir(path, j)
    return name, jobs, many


def load_task(path: Path) -> dict:
    """Parse and check a task file locally (errors name the field path); a
    relative ``workdir`` is resolved against the file's directory."""
    doc = _doc(path)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a task is a mapping with at least `run:`")
    if "jobs" in doc:
        raise ValueError(f"{path} is a pipeline (it has `jobs:`); `suanli launch` submits it, one task is expected here")
    try:
        Task.model_validate(doc)
    except ValidationError as exc:
        raise ValueError(f"{path}: {describe_validation(exc.errors())}") from None
    _resolve_workdir(path, doc)
    return doc
