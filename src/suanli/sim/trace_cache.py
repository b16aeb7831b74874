"""A parsed trace, kept on disk so the next run of the same file skips the CSV parse.

Parsing the default openb pod list (8,152 rows: a dict per row, ten checked integers)
took about as long as the rest of ``suanli sim fill``'s start; unpickling what it
produced takes a tenth of that. An entry is keyed by the file's resolved path, size and
modification time (nanoseconds) and by the source of the code that parsed it (a new
parsing rule or a changed ``Request`` must not be served an old result): any change
parses again. Only what parsed cleanly is stored (a bad row raises before), only files
of at least ``MIN_BYTES`` (smaller ones parse in a few milliseconds), one entry per path
(a changed file replaces its entry). The cache is a convenience: an unreadable, corrupt
or unwritable cache directory just means parsing, never an error.

Where: ``$SUANLI_CACHE_DIR``, else ``$XDG_CACHE_HOME/suanli``, else ``~/.cache/suanli``;
entries under ``traces/``, readable by their owner only. Delete the directory to clear it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

MIN_BYTES = 32 * 1024


def cache_dir() -> Path:
    if os.environ.get("SUANLI_CACHE_DIR"):
        return Path(os.environ["SUANLI_CACHE_DIR"]) / "traces"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "suanli" / "traces"


def _code_key(code_files: Sequence[str]) -> bytes:
    h = hashlib.sha256()
    for name in code_files:
        h.update(Path(name).read_bytes())
    return h.digest()


def cached(path: Path, kind: str, parse: Callable[[Path], T], code_files: Sequence[str]) -> T:
    """``parse(path)``, or what it returned for this very file and code before."""
    try:
        st = os.stat(path)
    except OSError:
        return parse(path)  # the parser says why, with the path
    if st.st_size < MIN_BYTES:
        return parse(path)
    real = os.path.realpath(path)
    key = (kind, real, st.st_size, st.st_mtime_ns, _code_key(code_files))
    entry = cache_dir() / (hashlib.sha256(f"{kind}\0{real}".encode()).hexdigest()[:32] + ".pickle")
    try:
        with open(entry, "rb") as f:
            stored_key, value = pickle.load(f)
        if stored_key == key:
            return value
    except Exception:  # noqa: BLE001 -- absent, truncated, another version: parse instead
        pass
    value = parse(path)
    _store(entry, key, value)
    return value


def _store(entry: Path, key: tuple, value: object) -> None:
    """Write atomically (a reader never sees half an entry); give up quietly if we can't."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump((key, value), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
