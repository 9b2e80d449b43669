"""Sealing job secrets with the cluster's secrets key (Fernet, from ``cryptography``).

The API seals a job's secret values at submit (:func:`seal`); the store keeps only the
token (field ``sealed_secrets`` of ``job:<job>``); the agent opens it at a task's start-up
(:func:`unseal`) and hands the values to that task's environment only. The key is one
file, ``secrets_key_file`` in ``scheduler.yaml`` and ``agent.yaml``
(default ``/etc/pasture/secrets.key``, mode 0600): a Fernet key, 32 random bytes in
URL-safe base64 (:func:`generate_key`; ``python -m scheduler.sealed`` prints a new
one). Threat model and key delivery per deployment: docs/api.md "Job secrets".

Fernet (AES-128-CBC + HMAC-SHA256, https://github.com/fernet/spec) authenticates the
token; the job's name is sealed with the values and checked on opening, so a token copied
to another job's record does not open there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

DEFAULT_KEY_FILE = Path("/etc/pasture/secrets.key")


class SealError(ValueError):
    """The secrets cannot be sealed or opened: no key, a bad key file, a token made with
    another key or for another job. The message names the cause, never a value."""


def generate_key() -> bytes:
    """A new Fernet key (44 bytes of URL-safe base64)."""
    return Fernet.generate_key()


def write_key(path: str | os.PathLike[str], key: bytes | None = None) -> Path:
    """Write ``key`` (a new one when None) to ``path`` with mode 0600, creating it
    exclusively. Raises FileExistsError when the file exists (a key is never replaced:
    every sealed job would stop opening)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write((key or generate_key()) + b"\n")
    return p


def load_key(path: str | os.PathLike[str] | None) -> bytes | None:
    """The key in ``path``; None when ``path`` is None or the file does not exist.

    Raises:
        SealError: the file is not a Fernet key (the message names the file).
    """
    if path is None:
        return None
    p = Path(path)
    try:
        key = p.read_bytes().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SealError(f"secrets key file {p}: cannot read it ({exc.strerror})") from None
    try:
        Fernet(key)
    except ValueError:
        raise SealError(
            f"secrets key file {p}: not a Fernet key (32 bytes in URL-safe base64)"
        ) from None
    return key


def seal(key: bytes | None, job: str, values: dict[str, str]) -> str:
    """The token of ``values`` (secret name -> value) for job ``job``.

    Raises:
        SealError: ``key`` is None (this cluster has no secrets key).
    """
    if key is None:
        raise SealError("this cluster has no secrets key (secrets_key_file in scheduler.yaml)")
    payload = json.dumps({"job": job, "values": values}, sort_keys=True).encode()
    return Fernet(key).encrypt(payload).decode()


def unseal(key: bytes | None, job: str, token: str) -> dict[str, str]:
    """The values sealed in ``token`` for ``job``.

    Raises:
        SealError: no key, a token made with another key (or altered), or sealed for
            another job.
    """
    if key is None:
        raise SealError("this node has no secrets key (secrets_key_file in agent.yaml)")
    try:
        payload = json.loads(Fernet(key).decrypt(token.encode()))
    except (InvalidToken, ValueError):
        raise SealError(
            "the job's secrets do not open with this node's secrets key (a different key "
            "than the API's, or an altered record)"
        ) from None
    if payload.get("job") != job or not isinstance(payload.get("values"), dict):
        raise SealError(f"the sealed secrets were not made for job {job!r}")
    return {str(k): str(v) for k, v in payload["values"].items()}


if __name__ == "__main__":  # python -m scheduler.sealed: a new key on stdout
    print(generate_key().decode())
