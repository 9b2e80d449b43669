"""Sealing job secrets (scheduler/sealed.py) and the submit path that uses it
(services/jobs.py + store, against a real redis-server)."""

from __future__ import annotations

import stat

import pytest

from scheduler.sealed import SealError, generate_key, load_key, seal, unseal, write_key
from scheduler.services.errors import InvalidSpecError
from scheduler.services.jobs import JobService
from scheduler.store import Store
from scheduler.store.tokens import TokenInfo, TokenRole

VALUES = {"TOKEN": "v-" + "x" * 20, "OTHER": "w"}


def test_seal_opens_with_the_same_key_for_the_same_job_only():
    key = generate_key()
    token = seal(key, "j", VALUES)
    assert VALUES["TOKEN"] not in token
    assert unseal(key, "j", token) == VALUES
    with pytest.raises(SealError, match="do not open"):
        unseal(generate_key(), "j", token)
    with pytest.raises(SealError, match="not made for job 'k'"):
        unseal(key, "k", token)
    with pytest.raises(SealError, match="do not open"):
        unseal(key, "j", token[:-4] + "AAAA")
    with pytest.raises(SealError, match="no secrets key"):
        unseal(None, "j", token)
    with pytest.raises(SealError, match="no secrets key"):
        seal(None, "j", VALUES)


def test_key_files(tmp_path):
    path = write_key(tmp_path / "k" / "secrets.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_key(path) is not None
    with pytest.raises(FileExistsError):  # never replaced: sealed jobs would not open
        write_key(path)
    assert load_key(tmp_path / "missing") is None and load_key(None) is None
    (tmp_path / "bad").write_text("not a key\n")
    with pytest.raises(SealError, match="bad: not a Fernet key"):
        load_key(tmp_path / "bad")


def _doc(name: str) -> dict:
    return {"name": name, "roles": {"w": {"command": "true"}}, "secrets": VALUES}


def test_submit_stores_only_the_sealed_token(redis_url, tmp_path):
    import redis

    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    admin = TokenInfo("root", TokenRole.ADMIN)
    key = write_key(tmp_path / "secrets.key")
    out = JobService(store, secrets_key_file=key).submit(admin, _doc("sealed-one"))
    assert out["spec"]["secrets"] == ["OTHER", "TOKEN"]
    assert VALUES["TOKEN"] not in repr(out)
    raw = store.r.hgetall("pasture:job:sealed-one")
    assert VALUES["TOKEN"] not in repr(raw)
    assert unseal(load_key(key), "sealed-one", store.sealed_secrets("sealed-one")) == VALUES
    # a cluster without a key refuses such a job (422 naming secrets), storing nothing
    with pytest.raises(InvalidSpecError) as info:
        JobService(store, secrets_key_file=tmp_path / "none").submit(admin, _doc("no-key"))
    assert info.value.errors[0]["loc"] == ["secrets"]
    assert "no secrets key" in str(info.value) and VALUES["TOKEN"] not in str(info.value)
    assert store.get_job("no-key") is None
