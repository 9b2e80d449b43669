"""Backup and restore of the store: every ``pasture:*`` key as one consistent snapshot.

Works through the network with the admin (``default``) credential, so it runs wherever
the scheduler settings do (``pasture admin backup FILE`` / ``restore FILE``)::

    backup   KEYS pasture:*                       the key set
             MULTI  KEYS pasture:*                the key set again, at EXEC time
                    DUMP k, PTTL k  for each key
             EXEC   -> same key set? write the file; else read again (a key was created
                       or deleted in between; at most MAX_TRIES times)
    restore  refuse a store that has pasture:* keys (unless force)
             MULTI  DEL existing pasture:* keys (force), RESTORE k ttl payload each
             EXEC   -> PUBLISH notify:loop

Everything between MULTI and EXEC runs at one instant (Redis runs a transaction without
interleaving other clients), so the file is a snapshot of one moment: a job's hash, its
tasks, the ledger and the node bindings agree. Redis is busy for the time the DUMPs take
(milliseconds per MB). DUMP payloads carry Redis' RDB version: restore into the same or a
newer Redis.

File format (gzip-compressed JSON)::

    {"format": "pasture-backup/1", "created": <epoch s>, "redis_version": "7.0.15",
     "prefix": "pasture:", "keys": [{"key": str, "ttl_ms": int (0 = none), "dump": b64}]}

Errors: :class:`BackupError` (not a pasture backup, store not empty, snapshot not
consistent after MAX_TRIES reads).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from scheduler.store.store import DEFAULT_PREFIX

FORMAT = "pasture-backup/1"
MAX_TRIES = 5


class BackupError(RuntimeError):
    """A backup could not be taken or restored; the message says why."""


@dataclass(frozen=True)
class BackupInfo:
    """What a backup or restore covered: key count, bytes of DUMP payloads, file path."""

    keys: int
    payload_bytes: int
    path: Path
    created: float


def raw_client(redis_settings: Any) -> redis.Redis:
    """A client without response decoding (DUMP payloads are binary) for a
    :class:`scheduler.settings.RedisSettings`."""
    client: redis.Redis = redis_settings.client(decode_responses=False)  # sentinels too
    return client


def _snapshot(client: redis.Redis, pattern: bytes) -> list[tuple[bytes, int, bytes]]:
    keys = sorted(client.keys(pattern))
    for _ in range(MAX_TRIES):
        pipe = client.pipeline(transaction=True)
        pipe.keys(pattern)
        for k in keys:
            pipe.dump(k)
            pipe.pttl(k)
        out = pipe.execute()
        now_keys = sorted(out[0])
        if now_keys == keys:
            rows = []
            for i, k in enumerate(keys):
                dump, ttl = out[1 + 2 * i], out[2 + 2 * i]
                if dump is not None:
                    rows.append((k, max(int(ttl), 0), dump))
            return rows
        keys = now_keys
    raise BackupError(
        f"the key set kept changing during {MAX_TRIES} reads; try again when the store is quieter"
    )


def backup(client: redis.Redis, path: Path, prefix: str = DEFAULT_PREFIX) -> BackupInfo:
    """Write a consistent snapshot of every ``<prefix>*`` key to ``path`` (mode 0600: it
    holds token hashes and job specs). ``client`` must not decode responses
    (:func:`raw_client`). Raises BackupError, redis errors, OSError."""
    rows = _snapshot(client, prefix.encode() + b"*")
    created = time.time()
    doc = {
        "format": FORMAT,
        "created": created,
        "redis_version": str(client.info("server").get("redis_version", "")),
        "prefix": prefix,
        "keys": [
            {"key": k.decode(), "ttl_ms": ttl, "dump": base64.b64encode(d).decode()}
            for k, ttl, d in rows
        ],
    }
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as f:
        f.write(json.dumps(doc).encode())
    os.replace(tmp, path)
    return BackupInfo(len(rows), sum(len(d) for _, _, d in rows), path, created)


def read_backup(path: Path) -> dict[str, Any]:
    """The backup document in ``path``. Raises BackupError when it is not one."""
    try:
        with gzip.open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError, EOFError) as exc:
        raise BackupError(f"{path}: not a pasture backup (gzip JSON): {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise BackupError(f"{path}: expected format {FORMAT!r}, got {got!r}")
    return doc


def restore(client: redis.Redis, path: Path, *, force: bool = False) -> BackupInfo:
    """Restore the backup in ``path`` in one transaction. Refuses (BackupError) when the
    store already holds keys of the backup's prefix, unless ``force``, which replaces them
    all (keys not in the backup are deleted). Wakes the loop. Stop the loop and the API
    while restoring; agents reconcile against the restored bindings.

    A transaction is not rolled back: when a RESTORE fails (a payload of a newer Redis),
    the keys before it are restored and the error is raised (redis.ResponseError)."""
    doc = read_backup(path)
    prefix = str(doc.get("prefix") or DEFAULT_PREFIX)
    existing = client.keys(prefix.encode() + b"*")
    if existing and not force:
        raise BackupError(
            f"the store already holds {len(existing)} {prefix}* key(s); restore only into an "
            "empty store, or pass --force to replace them"
        )
    try:
        rows = [(r["key"], int(r["ttl_ms"]), base64.b64decode(r["dump"])) for r in doc["keys"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise BackupError(f"{path}: a key entry is malformed: {exc}") from exc
    pipe = client.pipeline(transaction=True)
    stale = set(existing) - {key.encode() for key, _, _ in rows}
    if stale:
        pipe.delete(*sorted(stale))
    for key, ttl, payload in rows:
        pipe.restore(key, ttl, payload, replace=True)
    pipe.publish(prefix + "notify:loop", "restore")
    pipe.execute()
    return BackupInfo(len(rows), sum(len(p) for _, _, p in rows), Path(path), doc["created"])


__all__ = ["FORMAT", "BackupError", "BackupInfo", "backup", "raw_client", "read_backup", "restore"]
