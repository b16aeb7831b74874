"""The server's keyring: AES-256-GCM sealing of secrets under keys kept outside the database.

A stolen database (a dump, a backup, a replica) yields no secret without the key file, so
the key never goes in the database: it lives in ``<data-dir>/secret-key`` (created on first
use, mode 0600) or in a file the operator supplies (``--secret-key-file`` /
``$SUANLI_SECRET_KEY_FILE``: "bring your own key"). A key file readable by group or others is
refused: a key anyone on the host can read protects nothing.

The file is a keyring, several keys with one active, so keys rotate without downtime: new
seals use the active key, older ciphertexts still open under the key they name
(``v1.<key-id>.<base64url(nonce + ciphertext)>``). ``rotate`` adds a fresh active key and
rewrites the file atomically; a running server notices the new file (its mtime) and
reloads on its next seal or unseal. An operator's key file may also hold one bare key
(base64 of 32 bytes, e.g. ``openssl rand -base64 32``); its id is derived from the key.

The associated data (``aad``) binds a ciphertext to its owner and purpose
(``tenant:3:secret:HF_TOKEN``): a value copied into another tenant's row does not open.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import secrets as random
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from suanli.errors import DomainError

#: The default key file's name in the data directory.
KEY_FILE = "secret-key"
#: The environment variable naming an operator-supplied key file.
KEY_FILE_ENV = "SUANLI_SECRET_KEY_FILE"
VERSION = "v1"
NONCE_BYTES = 12  #: 96 bits, GCM's own size
KEY_BYTES = 32  #: AES-256


class SecretKeyError(DomainError):
    """The key file is missing, malformed or unsafe, or a sealed value does not open."""

    code = "secret_key"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id(key: bytes) -> str:
    """A bare key's id: stable (the same key always names itself the same) and short."""
    return hashlib.sha256(b"suanli-key-id:" + key).hexdigest()[:8]


@dataclass
class Keys:
    """What a key file holds: keys by id, and which one seals."""

    active: str
    keys: dict[str, bytes] = field(default_factory=dict)

    def to_text(self) -> str:
        return json.dumps({"active": self.active, "keys": {k: _b64(v) for k, v in self.keys.items()}}, indent=1) + "\n"


def parse_keys(text: str, where: Path) -> Keys:
    """A keyring (JSON) or one bare key (base64 or base64url of 32 bytes, or 64 hex digits)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            raw = json.loads(text)
            keys = {str(k): _unb64(str(v)) for k, v in raw["keys"].items()}
            active = str(raw["active"])
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
            raise SecretKeyError(f"{where}: not a Suanli keyring (JSON with 'active' and 'keys')") from None
        if active not in keys:
            raise SecretKeyError(f"{where}: the active key {active!r} is not among its keys")
    else:
        key = _bare_key(text)
        if key is None:
            raise SecretKeyError(f"{where}: expected a keyring or one 256-bit key (base64 of 32 bytes, or 64 hex digits)")
        active, keys = key_id(key), {key_id(key): key}
    bad = [k for k, v in keys.items() if len(v) != KEY_BYTES or not k or "." in k]
    if bad:
        raise SecretKeyError(f"{where}: key(s) {', '.join(bad)} are not 256-bit keys with a dot-free id")
    return Keys(active, keys)


def _bare_key(text: str) -> bytes | None:
    if re.fullmatch(f"[0-9a-fA-F]{{{2 * KEY_BYTES}}}", text):
        return bytes.fromhex(text)
    try:  # standard or URL-safe alphabet, padded or not
        key = base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        return None
    return key if len(key) == KEY_BYTES else None


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a 0600 file (temporary file in the same directory,
    then rename): a reader sees the old keyring or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def check_private(path: Path) -> os.stat_result:
    """The key file's stat; refused when group or others may read or write it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SecretKeyError(f"no key file {path}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SecretKeyError(f"{path} is not a regular file")
    if st.st_mode & 0o077:
        raise SecretKeyError(
            f"{path} is readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"the key must be private to the server's user: chmod 600 {path}"
        )
    return st


class Keyring:
    """Seal and unseal with the keys of one key file, reloaded when the file changes."""

    def __init__(self, path: Path, keys: Keys, stamp: tuple[int, int, int]) -> None:
        self.path = path
        self._keys = keys
        self._stamp = stamp
        self._lock = threading.Lock()

    @classmethod
    def load(cls, data_dir: Path, key_file: Path | None = None) -> Keyring:
        """The keyring of ``key_file`` (it must exist: an operator's key is never invented),
        else of ``$SUANLI_SECRET_KEY_FILE``, else ``<data_dir>/secret-key``, created with a
        fresh key on first use."""
        if key_file is None and os.environ.get(KEY_FILE_ENV):
            key_file = Path(os.environ[KEY_FILE_ENV])
        if key_file is None:
            path = Path(data_dir) / KEY_FILE
            if not path.exists():
                Path(data_dir).mkdir(parents=True, exist_ok=True)
                key = AESGCM.generate_key(bit_length=256)
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:  # another process made it first: use theirs
                    pass
                else:
                    with os.fdopen(fd, "w") as f:
                        f.write(_fresh(key).to_text())
        else:
            path = Path(key_file).expanduser()
        path = path.resolve()
        keys, stamp = _read(path)
        return cls(path, keys, stamp)

    @property
    def active_id(self) -> str:
        self._refresh()
        return self._keys.active

    @property
    def key_ids(self) -> list[str]:
        self._refresh()
        return sorted(self._keys.keys)

    def seal(self, plaintext: str, aad: str) -> str:
        """``v1.<key-id>.<base64url(nonce + ciphertext + tag)>`` under the active key."""
        self._refresh()
        keys = self._keys
        nonce = os.urandom(NONCE_BYTES)
        ct = AESGCM(keys.keys[keys.active]).encrypt(nonce, plaintext.encode(), aad.encode())
        return f"{VERSION}.{keys.active}.{_b64(nonce + ct)}"

    def unseal(self, sealed: str, aad: str) -> str:
        """The plaintext; ``SecretKeyError`` (never the value) when it does not open: another
        owner's ciphertext, a key no longer in the keyring, or a tampered value."""
        parts = sealed.split(".")
        if len(parts) != 3 or parts[0] != VERSION:
            raise SecretKeyError("not a sealed value")
        kid = parts[1]
        self._refresh()
        if kid not in self._keys.keys:
            self._refresh(force=True)  # rotated since: the file may know it now
        key = self._keys.keys.get(kid)
        if key is None:
            raise SecretKeyError(f"sealed under key {kid}, which the keyring {self.path} does not hold")
        try:
            raw = _unb64(parts[2])
            return AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad.encode()).decode()
        except (InvalidTag, ValueError, binascii.Error):
            raise SecretKeyError(f"a sealed value does not open as {aad} (another owner's, or altered)") from None

    def reseal(self, sealed: str, aad: str) -> str:
        """``sealed`` under the active key (itself when it already is)."""
        if sealed.split(".")[1:2] == [self.active_id]:
            return sealed
        return self.seal(self.unseal(sealed, aad), aad)

    def rotate(self) -> str:
        """Add a fresh key and make it active; older keys stay, so what they sealed still
        opens. The file is rewritten atomically, 0600. Returns the new key's id."""
        with self._lock:
            keys, _ = _read(self.path)
            new = _new_id()
            keys.keys = {new: AESGCM.generate_key(bit_length=256), **keys.keys}
            keys.active = new
            write_private(self.path, keys.to_text())
            self._keys, self._stamp = _read(self.path)
            return new

    def prune(self) -> list[str]:
        """Drop every key but the active one (once everything is resealed under it);
        returns the ids dropped."""
        with self._lock:
            keys, _ = _read(self.path)
            dropped = sorted(k for k in keys.keys if k != keys.active)
            if dropped:
                keys.keys = {keys.active: keys.keys[keys.active]}
                write_private(self.path, keys.to_text())
            self._keys, self._stamp = _read(self.path)
            return dropped

    def _refresh(self, force: bool = False) -> None:
        """Reload when the file changed (mtime, size, inode): a rotation done by
        ``suanli server rotate-key`` reaches this server without a restart."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return  # keep the keys we hold; a missing file is the operator's to fix
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp and not force:
            return
        with self._lock:
            self._keys, self._stamp = _read(self.path)


def _new_id() -> str:
    return random.token_hex(4)


def _fresh(key: bytes) -> Keys:
    kid = _new_id()
    return Keys(kid, {kid: key})


def _read(path: Path) -> tuple[Keys, tuple[int, int, int]]:
    st = check_private(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SecretKeyError(f"cannot read the key file {path}: {exc.strerror}") from None
    return parse_keys(text, path), (st.st_mtime_ns, st.st_size, st.st_ino)
