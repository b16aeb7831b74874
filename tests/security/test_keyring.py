"""The keyring itself: AES-256-GCM under a key file outside the database, private by mode,
an operator's own key, rotation that a running reader picks up without a restart."""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from suanli.control.secrets import KEY_FILE_ENV, Keyring, SecretKeyError

AAD = "tenant:3:secret:HF_TOKEN"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_use_makes_a_private_key_file_and_seals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    ring = Keyring.load(tmp_path)
    assert ring.path == (tmp_path / "secret-key").resolve() and mode(ring.path) == 0o600
    sealed = ring.seal("hf_value", AAD)
    version, kid, body = sealed.split(".")
    assert (version, kid) == ("v1", ring.active_id) and "hf_value" not in sealed
    assert ring.unseal(sealed, AAD) == "hf_value"
    assert ring.seal("hf_value", AAD) != sealed  # a fresh nonce each time
    assert Keyring.load(tmp_path).unseal(sealed, AAD) == "hf_value"  # the same key next start


def test_a_ciphertext_bound_to_another_owner_or_altered_does_not_open(tmp_path: Path) -> None:
    ring = Keyring.load(tmp_path)
    sealed = ring.seal("hf_value", AAD)
    for aad in ("tenant:4:secret:HF_TOKEN", "tenant:3:secret:OTHER"):
        with pytest.raises(SecretKeyError) as refused:
            ring.unseal(sealed, aad)
        assert "hf_value" not in str(refused.value)
    body = sealed.rsplit(".", 1)
    flipped = body[0] + "." + ("A" if body[1][0] != "A" else "B") + body[1][1:]
    with pytest.raises(SecretKeyError):
        ring.unseal(flipped, AAD)
    with pytest.raises(SecretKeyError):
        ring.unseal("plaintext", AAD)


@pytest.mark.parametrize("bits", [0o644, 0o640, 0o604])
def test_a_key_file_group_or_others_can_read_is_refused(tmp_path: Path, bits: int) -> None:
    Keyring.load(tmp_path)
    os.chmod(tmp_path / "secret-key", bits)
    with pytest.raises(SecretKeyError) as refused:
        Keyring.load(tmp_path)
    assert "chmod 600" in refused.value.message and f"{bits:04o}" in refused.value.message


def test_bring_your_own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "operator.key"
    raw = os.urandom(32)
    own.write_text(base64.b64encode(raw).decode() + "\n")  # what `openssl rand -base64 32` prints
    own.chmod(0o600)
    data = tmp_path / "data"
    ring = Keyring.load(data, own)
    sealed = ring.seal("v", AAD)
    assert not (data / "secret-key").exists()  # the operator's key, no other
    monkeypatch.setenv(KEY_FILE_ENV, str(own))
    assert Keyring.load(data).unseal(sealed, AAD) == "v"
    hex_key = tmp_path / "hex.key"
    hex_key.write_text(raw.hex())
    hex_key.chmod(0o600)
    assert Keyring.load(data, hex_key).unseal(sealed, AAD) == "v"  # the same key, another spelling
    missing = tmp_path / "nope.key"
    with pytest.raises(SecretKeyError, match="no key file"):
        Keyring.load(data, missing)
    assert not missing.exists()  # an operator's key is never invented
    short = tmp_path / "short.key"
    short.write_text(base64.b64encode(os.urandom(16)).decode())
    short.chmod(0o600)
    with pytest.raises(SecretKeyError, match="256-bit"):
        Keyring.load(data, short)


def test_rotation_keeps_old_ciphertexts_and_reaches_a_running_reader(tmp_path: Path) -> None:
    running = Keyring.load(tmp_path)  # the server's keyring
    old = running.seal("before", AAD)
    old_id = running.active_id
    operator = Keyring.load(tmp_path)  # `suanli server rotate-key`, another process
    new_id = operator.rotate()
    assert new_id != old_id and mode(operator.path) == 0o600
    assert json.loads(operator.path.read_text())["active"] == new_id
    assert [p.name for p in tmp_path.iterdir()] == ["secret-key"]  # written by rename, no leftovers
    # the running keyring sees the new file without a restart
    fresh = running.seal("after", AAD)
    assert fresh.split(".")[1] == new_id and running.unseal(old, AAD) == "before"
    assert running.reseal(old, AAD).split(".")[1] == new_id
    assert operator.prune() == [old_id]
    with pytest.raises(SecretKeyError, match=old_id):
        running.unseal(old, AAD)
    assert running.unseal(fresh, AAD) == "after"


def test_concurrent_seals_during_a_rotation_all_open(tmp_path: Path) -> None:
    ring = Keyring.load(tmp_path)
    sealed: list[str] = []

    def work() -> None:
        for i in range(200):
            sealed.append(ring.seal(f"v{i}", AAD))

    t = threading.Thread(target=work)
    t.start()
    for _ in range(3):
        Keyring.load(tmp_path).rotate()
    t.join()
    assert sorted(ring.unseal(s, AAD) for s in sealed) == sorted(f"v{i}" for i in range(200))
