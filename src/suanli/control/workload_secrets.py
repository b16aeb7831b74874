"""A workload's secrets (task ``secrets:``, ``--secret K=V``): sealed into the row's
``secrets`` column, masked in every listing, unsealed only into its environment (their
names are checked by ``control.secret_names``).

Each value is sealed (``control.secrets``) with associated data naming its tenant and its
name, so a ciphertext moved into another tenant's row, or renamed, does not open. Values
never reach a log, an event or an error message: errors here name the secret, not its value.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select

from suanli.control.secrets import Keyring
from suanli.db.models import Instance, Job
from suanli.db.session import Database
from suanli.errors import Invalid

#: What listings show in place of a value.
MASK = "******"
MAX_VALUE_BYTES = 64 << 10


def aad(tenant_id: int, name: str) -> str:
    """What a secret's ciphertext is bound to: its tenant and its name."""
    return f"tenant:{tenant_id}:secret:{name}"


def seal(keyring: Keyring, tenant_id: int, values: Mapping[str, str]) -> dict[str, str]:
    """name -> sealed value, for the row's ``secrets`` column."""
    too_long = sorted(k for k, v in values.items() if len(v.encode()) > MAX_VALUE_BYTES)
    if too_long:
        raise Invalid(f"secrets: {', '.join(too_long)}: a value is at most {MAX_VALUE_BYTES >> 10} KiB")
    return {k: keyring.seal(v, aad(tenant_id, k)) for k, v in values.items()}


def unseal(keyring: Keyring, tenant_id: int, sealed: Mapping[str, str] | None) -> dict[str, str]:
    """name -> value, for the workload's environment only."""
    return {k: keyring.unseal(v, aad(tenant_id, k)) for k, v in (sealed or {}).items()}


def masked(sealed: Mapping[str, str] | None) -> dict[str, str]:
    """What an API or CLI listing shows: the names, never the values."""
    return {k: MASK for k in sorted(sealed or {})}


def reseal_all(db: Database, keyring: Keyring) -> int:
    """Every stored workload secret under the keyring's active key (after a rotation):
    one transaction per row, so a running server keeps working meanwhile. Returns how
    many values changed."""
    return _reseal(db, keyring, Instance) + _reseal(db, keyring, Job)


def _reseal(db: Database, keyring: Keyring, model: type[Instance] | type[Job]) -> int:
    changed = 0
    with db.sessions() as s:
        # filtered here: PostgreSQL's json type has no equality to test for {} with
        ids = [i for i, sealed in s.execute(select(model.id, model.secrets).order_by(model.id)) if sealed]
    for row_id in ids:
        with db.transaction() as s:
            row = s.get(model, row_id, with_for_update=True)
            if not isinstance(row, Instance | Job) or not row.secrets:
                continue
            new = {k: keyring.reseal(v, aad(row.tenant_id, k)) for k, v in row.secrets.items()}
            changed += sum(new[k] != row.secrets[k] for k in new)
            if new != row.secrets:
                row.secrets = new
    return changed
