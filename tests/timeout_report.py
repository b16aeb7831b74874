"""When a test fails on a timeout (an httpx client's, ``TimeoutError``, a subprocess's),
its report gets what the process and the machine were doing at that moment: every
thread's stack (an in-process server's handler stuck on a lock or a query shows there),
the load average and the kernel's pressure-stall figures (whether tasks were waiting for
CPU, I/O or memory), and what PostgreSQL sessions were waiting on.

Why: a timeout under load says only that something was slow. A flaky one seen once in
five suite runs (an in-process API that did not answer a POST in 5 s) left nothing to
find its cause by; the next one will."""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest


def _is_timeout(exc: BaseException) -> bool:
    return any("Timeout" in cls.__name__ for cls in type(exc).__mro__)


def _threads() -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue  # this hook's own stack
        parts.append(f"--- thread {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def _machine() -> str:
    lines = []
    for path in ("/proc/loadavg", "/proc/pressure/cpu", "/proc/pressure/io", "/proc/pressure/memory"):
        try:
            text = Path(path).read_text().strip().replace("\n", " | ")
        except OSError:
            continue
        lines.append(f"{path}: {text}")
    return "\n".join(lines)


def _postgres() -> str:
    from tests.pg_helpers import PG_SKIP, pg_waits

    return "" if PG_SKIP else pg_waits()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not report.failed or not _is_timeout(call.excinfo.value):
        return
    for title, take in (("machine", _machine), ("threads at the timeout", _threads), ("PostgreSQL waits", _postgres)):
        try:
            text = take()
        except Exception as exc:  # a report must never fail the run
            text = f"(could not read: {exc!r})"
        if text:
            report.sections.append((title, text))
