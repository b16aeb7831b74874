"""Migrated SQLite databases for tests: the migrations run once per test process, into a
template file that each test copies. A copy takes about a millisecond; the migrations
take 0.1-0.3 s (several times that on a loaded machine), paid before by every SQLite
test that builds a server. Tests of the migrations themselves start from an empty file."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from suanli.db.session import Database

_template: list[Path] = []


def _migrated_template() -> Path:
    if not _template:
        root = Path(tempfile.mkdtemp(prefix="suanli-sqlite-template-"))
        atexit.register(shutil.rmtree, root, True)
        path = root / "migrated.db"
        db = Database(f"sqlite:///{path}")
        db.migrate()
        db.dispose()  # the last connection checkpoints the WAL into the file
        assert not Path(f"{path}-wal").exists(), "the template's WAL was not checkpointed"
        _template.append(path)
    return _template[0]


def migrated_sqlite_url(path: Path) -> str:
    """``sqlite:///<path>``, ``path`` a fresh copy of the migrated (empty) schema."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise FileExistsError(f"{path} exists: a migrated copy goes only where no database is")
    shutil.copyfile(_migrated_template(), path)
    return f"sqlite:///{path}"
