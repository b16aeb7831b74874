"""Events as text for assertion messages: a failed test should say what happened, not
``[<Event object at 0x...>]``. Use ``assert ..., events_text(events)``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

FIELDS = ("ts", "kind", "object_id", "from_state", "to_state", "message")


def event_line(event: Any) -> str:
    """``ts kind id from->to message`` for an ORM ``Event`` or an event of ``GET /v1/events``."""
    e = event if isinstance(event, Mapping) else {f: getattr(event, f) for f in FIELDS}
    ts = e["ts"]
    if isinstance(ts, datetime):
        ts = f"{ts:%H:%M:%S.%f}"
    elif isinstance(ts, str):
        ts = ts[11:26] or ts  # the time of an ISO timestamp
    return f"{ts} {e['kind']} {e['object_id']} {e['from_state']}->{e['to_state']} {e['message']}"


def events_text(events: Iterable[Any], indent: str = "  ") -> str:
    """One ``event_line`` per event, oldest first (as given), each on its own line."""
    return "\n".join(indent + event_line(e) for e in events) or f"{indent}(no events)"
