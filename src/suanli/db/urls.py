"""Where the database URL comes from, and how it is shown.

A URL with a password on the command line is readable by every user of the host (``ps``,
``/proc/PID/cmdline``), so the server also takes it from ``$SUANLI_DB`` or from a file
(``--db-file``, private to its user); whatever the source, it is shown with the password
masked and never handed to a subprocess's argv.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

#: The environment variable holding the database URL.
DB_ENV = "SUANLI_DB"


class DbUrlError(ValueError):
    """The URL's source is unusable (a file group or others may read, no URL in it, ...)."""


def resolve(db: str | None, db_file: Path | None) -> tuple[str | None, str]:
    """The URL (None: SQLite in the data dir) and where it came from (for messages).
    ``--db`` and ``--db-file`` exclude each other; either beats ``$SUANLI_DB``."""
    if db and db_file:
        raise DbUrlError("give the database URL once: --db or --db-file")
    if db_file is not None:
        return read_file(Path(db_file)), f"--db-file {db_file}"
    if db:
        return db, "--db"
    if os.environ.get(DB_ENV):
        return os.environ[DB_ENV].strip(), f"${DB_ENV}"
    return None, "default"


def read_file(path: Path) -> str:
    """The first non-empty, non-comment line of ``path``, which must be private (0600)."""
    try:
        st = path.stat()
        text = path.read_text()
    except OSError as exc:
        raise DbUrlError(f"--db-file {path}: {exc.strerror}") from None
    if st.st_mode & 0o077:
        raise DbUrlError(
            f"--db-file {path} is readable by group or others (mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}"
        )
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        raise DbUrlError(f"--db-file {path} holds no database URL")
    return lines[0]


def has_password(url: str) -> bool:
    try:
        return make_url(url).password is not None
    except ArgumentError:
        return False


def masked(url: str) -> str:
    """``url`` with its password as ``***`` (SQLAlchemy's own rendering)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<not a database URL>"
