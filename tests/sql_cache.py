"""One cache of compiled SQL for every engine a test process makes.

SQLAlchemy compiles each statement shape once per engine and keeps it in that engine's
cache (and, for the ORM's flushes, in each mapper's cache, keyed by the engine's dialect).
A server keeps one engine for its life, so it compiles each shape once. The suite builds
a server, so an engine, for most tests: every test compiled all its statements anew,
about a fifth of a test process's CPU (BENCHMARKS.md, issue 11, session 25), and the
mapper caches kept the compiled statements of every engine the process had disposed.

Here the caches are shared, keyed by what a compiled statement depends on: the dialect's
class and its settings, not the dialect object itself. That is sound because every engine
the suite makes comes from ``make_engine`` with the same settings for the same kind of
database, and all its PostgreSQL databases live on one server: two dialects of the same
class and settings compile a statement to the same SQL. Statements are compiled and
executed as they would be; only the compiling is not repeated.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.util import LRUCache

#: the settings of a dialect that SQL compiles from: everything plain it holds
_PLAIN = (bool, int, float, str, tuple, type(None))


def _signature(dialect: Dialect) -> tuple:
    settings = sorted((k, v) for k, v in vars(dialect).items() if isinstance(v, _PLAIN))
    return (type(dialect), *settings)


class SharedCompiledCache:
    """A compiled cache (SQLAlchemy asks for ``get`` and item assignment) whose keys name
    the dialect by its signature. A dialect's signature is taken at its first statement,
    after its first connection has set what it learns from the server."""

    def __init__(self, size: int = 5000) -> None:
        self._cache: LRUCache[tuple, Any] = LRUCache(size)
        self._signatures: weakref.WeakKeyDictionary[Dialect, tuple] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def _key(self, key: tuple) -> tuple:
        dialect = key[0]
        with self._lock:
            signature = self._signatures.get(dialect)
            if signature is None:
                signature = self._signatures[dialect] = _signature(dialect)
        return (signature, *key[1:])

    def get(self, key: tuple, default: Any = None) -> Any:
        return self._cache.get(self._key(key), default)

    def __setitem__(self, key: tuple, value: Any) -> None:
        self._cache[self._key(key)] = value


def share_compiled_sql() -> None:
    """Every engine ``suanli.db.session.make_engine`` makes from now on, and every ORM
    mapper's flush statements, use one shared cache each."""
    from suanli.db import session
    from suanli.db.models import Base

    engines = SharedCompiledCache()
    make_engine = session.make_engine

    def shared_make_engine(*args: Any, **kw: Any) -> Engine:
        engine = make_engine(*args, **kw)
        engine.update_execution_options(compiled_cache=engines)
        return engine

    session.make_engine = shared_make_engine  # type: ignore[assignment]

    flushes = SharedCompiledCache()
    for mapper in Base.registry.mappers:
        # the ORM's own cache of a mapper's flush statements (a memoized attribute):
        # it takes precedence over the engine's, so it is shared too
        assert "_compiled_cache" in type(mapper).__dict__, "SQLAlchemy no longer has Mapper._compiled_cache"
        mapper._compiled_cache = flushes  # type: ignore[misc]
