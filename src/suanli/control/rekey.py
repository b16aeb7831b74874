"""Key rotation without downtime (``suanli server rotate-key``).

1. A fresh key becomes the keyring's active key; the old ones stay in the file. A running
   server sees the file change and reloads it on its next seal or unseal (``Keyring``): it
   seals with the new key at once and still opens what the old keys sealed.
2. Every stored secret is resealed under the new key, one row per transaction, while the
   server keeps serving.
3. Optionally (``prune``) the old keys leave the file, once nothing needs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from suanli.control import accounts, workload_secrets
from suanli.control.secrets import Keyring
from suanli.db.session import Database


@dataclass
class Rotation:
    key_file: Path
    old: str
    new: str
    resealed: int
    dropped: list[str] = field(default_factory=list)


def reseal_everything(db: Database, keyring: Keyring) -> int:
    """Every sealed value the platform stores, under the active key. A new sealed column
    adds its reseal here."""
    return workload_secrets.reseal_all(db, keyring) + accounts.reseal_totp(db, keyring)


def rotate(db: Database, data_dir: Path, key_file: Path | None = None, prune: bool = False) -> Rotation:
    keyring = Keyring.load(data_dir, key_file)
    old = keyring.active_id
    new = keyring.rotate()
    count = reseal_everything(db, keyring)
    dropped = keyring.prune() if prune else []
    return Rotation(keyring.path, old, new, count, dropped)
