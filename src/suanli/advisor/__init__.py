"""Suanli advisor: what to rent, how much memory, how long, what it costs.

A pure library: every function takes numbers and dataclasses and returns dataclasses
that serialise to JSON (``suanli.advisor.to_jsonable``). The only I/O is reading the
bundled catalog, model table and price book, and a config.json or demand CSV the caller
names. The CLI (``suanli advise``, ``suanli tco``, ``suanli plan``) and the API sit on top.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from suanli.advisor.errors import AdvisorError


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (nested) to plain dicts/lists, for ``--json`` and the API."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return out
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


__all__ = ["AdvisorError", "to_jsonable"]
