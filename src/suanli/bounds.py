"""What a request may carry: ids within the database's integer range, finite numbers within
physical bounds, text without NUL. One definition of each, used by every request model
(``api.schemas``, ``control.task``, ``inventory``) and, through ``api.params``, by the path
and query parameters, so a bad value is a 422 naming its field before anything is read or
written.

Why each bound: an id above 2**63 overflowed SQLite's driver and one from 2**31 PostgreSQL's
INTEGER columns (500s); ``1e309`` is a float, infinity, and infinite cores or GiB failed the
arithmetic that turns them into milli-cores and MiB (500); PostgreSQL refuses a NUL in text
and in JSON (500), and a NUL in an environment variable was stored, then failed the launch.
``str.isdigit`` is true for "²", which ``int`` refuses: ``parse_id`` reads ASCII digits only.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

#: the largest id, and the largest value of any INTEGER column (PostgreSQL's INTEGER;
#: SQLite's are wider, but one server's data must move to the other)
DB_INT_MAX = 2**31 - 1

#: physical bounds of one node's (and one request's) resources: generous, but finite
MAX_CPUS = 4096.0  #: cores
MAX_MEMORY_GIB = 65536.0  #: 64 TiB
MAX_GPU_MEMORY_GIB = 4096.0  #: per GPU
MAX_GPUS = 64  #: per node
MAX_DISK_GIB = 65536
#: a timestamp in ms since the epoch: up to the end of year 9999
MAX_MS = 253_402_300_799_999

#: the text of one SSH public key: an RSA 16384-bit key line is ~2.8 KB; anything far
#: larger is not a key (here, not in ``control.keys``: the CLI checks it too, and must not
#: load the control plane to do so)
MAX_KEY_TEXT = 16 * 1024

#: Markers of private key files: OpenSSH, PEM (PKCS#1, SEC1, PKCS#8, encrypted) and PuTTY.
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|PuTTY-User-Key-File-|^\s*openssh-key-v1", re.M)


def looks_private(text: str) -> bool:
    """True for the text of a private key file; the CLI checks it too, before sending anything."""
    return bool(_PRIVATE_KEY.search(text))


NUL_PATTERN = r"^[^\x00]*$"


def no_nul(value: str) -> str:
    """PostgreSQL stores no NUL in text or JSON, and a process gets none in its environment."""
    if "\x00" in value:
        raise ValueError("must not contain a NUL character (\\x00)")
    return value


#: text without NUL; give its length at the field (``Text = Field(max_length=...)``). The
#: schema carries the rule as a pattern, so clients and fuzzers know it.
Text = Annotated[str, AfterValidator(no_nul), Field(json_schema_extra={"pattern": NUL_PATTERN})]

#: a tenant named by its name or its id (``parse_id``)
TenantRef = Annotated[
    str, AfterValidator(no_nul), Field(min_length=1, max_length=100, json_schema_extra={"pattern": NUL_PATTERN})
]

#: an id of a row: what a path or body names a row by
Id = Annotated[int, Field(ge=1, le=DB_INT_MAX)]

#: a count or a size stored in an INTEGER column
DbInt = Annotated[int, Field(ge=0, le=DB_INT_MAX)]

#: finite floats (``allow_inf_nan=False``) within the physical bounds above
Cpus = Annotated[float, Field(gt=0, le=MAX_CPUS, allow_inf_nan=False)]
MemoryGib = Annotated[float, Field(gt=0, le=MAX_MEMORY_GIB, allow_inf_nan=False)]
GpuMemoryGib = Annotated[float, Field(ge=0, le=MAX_GPU_MEMORY_GIB, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]

#: a point in time as ms since the epoch
EpochMs = Annotated[int, Field(ge=0, le=MAX_MS)]


def parse_id(text: str) -> int | None:
    """The id ``text`` spells (ASCII digits, 1..``DB_INT_MAX``), else None: a caller that
    also takes names looks the text up as a name then, and finds none for a number out of
    range, rather than overflowing the database's integer."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        return None
    n = int(text)
    return n if 1 <= n <= DB_INT_MAX else None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$", re.I)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """``90s``, ``30m``, ``2h``, ``1d`` or bare seconds as whole seconds; ValueError otherwise
    (the idle auto-stop window, ``--autostop``)."""
    m = _DURATION.match(str(text))
    if m is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 30m, 2h, 1d)")
    seconds = float(m.group(1)) * _UNIT_S[(m.group(2) or "s").lower()]
    if seconds > 366 * 86400:
        raise ValueError(f"{text!r} is longer than a year")
    return int(round(seconds))


def duration_text(seconds: float) -> str:
    """The shortest of ``2h``, ``30m``, ``90s`` that says ``seconds`` exactly."""
    s = int(seconds)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s and s % n == 0:
            return f"{s // n}{unit}"
    return f"{s}s"
