"""A pipeline's plan, checked before anything is created: sweeps expanded, names
resolved, cycles found. Pure (no database), so ``suanli launch`` checks a file on the
renter's machine, before uploading anything, with the server's own rules.

A sweep (``matrix: {lr: [1e-4, 3e-4], bs: [16, 32]}``) becomes one job per combination,
its values in the job's envs and its name (``train-lr=1e-4-bs=16``); a dependency on
the swept name is a dependency on all of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from suanli.control.task import MAX_PIPELINE_JOBS, Task, env_text
from suanli.errors import Invalid


# -- sweeps ---------------------------------------------------------------------------------
def expand(task: Task) -> list[Task]:
    """One task per combination of ``task.matrix`` (the task itself when it has none):
    the values in its envs, its name suffixed with them."""
    if not task.matrix:
        return [task]
    keys = list(task.matrix)
    out = []
    for combo in itertools.product(*(task.matrix[k] for k in keys)):
        values = {k: env_text(v) for k, v in zip(keys, combo, strict=True)}
        name = "-".join([task.name or "sweep", *(f"{k}={v}" for k, v in values.items())])
        if len(name) > 100:
            raise Invalid(f"matrix: the job name {name!r} is over 100 characters; use a shorter name or values")
        out.append(task.model_copy(update={"name": name, "matrix": {}, "envs": {**task.envs, **values}}))
    return out


# -- checking the graph ---------------------------------------------------------------------
def _cycle(names: list[str], edges: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle among ``names`` as its path (first name repeated at the end)."""
    colour: dict[str, int] = {}  # 1: on the path, 2: done
    for root in names:
        if colour.get(root):
            continue
        path = [root]
        stack = [iter(edges.get(root, ()))]
        colour[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                stack.pop()
                continue
            if colour.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if not colour.get(nxt):
                colour[nxt] = 1
                path.append(nxt)
                stack.append(iter(edges.get(nxt, ())))
    return None


def plan(tasks: Sequence[Task]) -> tuple[list[Task], list[list[int | tuple[str, int]]]]:
    """Expand sweeps and resolve names: the jobs to create, and for each the jobs it
    waits for, as positions in that list (``("new", i)``) or existing ids (``int``).
    Raises Invalid naming the field path or the cycle."""
    pipeline = len(tasks) > 1 or any(t.matrix for t in tasks)
    names: list[str] = []
    for i, t in enumerate(tasks):
        if pipeline and not t.name:
            raise Invalid(f"jobs[{i}].name: a pipeline's jobs need a name (depends_on refers to them by it)")
        if t.name and t.name in names:
            raise Invalid(f"jobs[{i}].name: {t.name!r} is used twice in this pipeline")
        names.append(t.name)
    edges: dict[str, list[str]] = {}
    for i, t in enumerate(tasks):
        where = f"jobs[{i}].depends_on" if pipeline else "depends_on"
        for d in t.depends_on:
            if isinstance(d, str) and d not in names:
                known = ", ".join(n for n in names if n) or "none"
                raise Invalid(f"{where}: no job named {d!r} in this pipeline (its jobs: {known}); an existing job is given by id")
        edges[t.name] = [d for d in t.depends_on if isinstance(d, str)]
    cycle = _cycle([n for n in names if n], edges)
    if cycle:
        raise Invalid(f"depends_on: a dependency cycle: {' -> '.join(cycle)}")
    made: list[Task] = []
    positions: dict[str, list[int]] = {}
    for t in tasks:
        out = expand(t)
        positions[t.name] = list(range(len(made), len(made) + len(out)))
        made += out
        if len(made) > MAX_PIPELINE_JOBS:
            raise Invalid(f"jobs: more than {MAX_PIPELINE_JOBS} jobs in one pipeline (sweeps expanded)")
    deps: list[list[int | tuple[str, int]]] = []
    for t in tasks:
        resolved: list[int | tuple[str, int]] = []
        for d in t.depends_on:
            resolved += [("new", p) for p in positions[d]] if isinstance(d, str) else [d]
        deps += [list(resolved) for _ in positions[t.name]]
    return made, deps
