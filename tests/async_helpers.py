"""Running a coroutine from a test."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` in a thread of its own, and its result: the browser suite's
    Playwright keeps an event loop running in the main thread for the whole session."""
    box: list[Any] = []
    failed: list[BaseException] = []

    def target() -> None:
        try:
            box.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised in the test's thread
            failed.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if failed:
        raise failed[0]
    return box[0]
