"""Which names a workload's secrets may have: rules on text alone, kept apart from
``control.workload_secrets`` (sealing, rows) so that checking a task file, as
``suanli launch`` does before it sends one, loads no database layer (issue 18)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from suanli.errors import Invalid

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The platform's own variables (``SUANLI_*``) are set by the launcher; a secret may not shadow them.
RESERVED_PREFIX = "SUANLI_"
MAX_SECRETS = 64


def check_names(names: list[str], envs: Mapping[str, object] = {}, field: str = "secrets") -> None:
    """Refuse (``Invalid``, naming only the names) a bad or reserved name, or one also in ``envs``."""
    for name in names:
        if not ENV_NAME.match(name):
            raise Invalid(f"{field}: {name!r} is not a valid environment variable name")
        if name.upper().startswith(RESERVED_PREFIX):
            raise Invalid(f"{field}: {name!r}: names starting with {RESERVED_PREFIX} are the platform's")
    both = sorted(set(names) & set(envs))
    if both:
        raise Invalid(f"{field}: {', '.join(both)} also in envs; a variable is either a secret or not")
    if len(names) > MAX_SECRETS:
        raise Invalid(f"{field}: at most {MAX_SECRETS} secrets")
