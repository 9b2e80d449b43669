"""Backup and restore of the store: every ``pasture:*`` key as one consistent snapshot.

Works through the network with the admin (``default``) credential, so it runs wherever
the scheduler settings do (``pasture admin backup FILE`` / ``restore FILE``)::

    backup   KEYS pasture:*                       the key set
             MULTI  KEYS pasture:*                the key set again, at EXEC time
                    DUMP k, PTTL k  for each key
             EXEC   -> same key set? write the file; else read again (a key was created
                       or deleted in between; at most MAX_TRIES times)
    restore  read the live store's jobs (state, stop request, created) and version
             refuse a store that holds jobs (unless force); agents' keys never count
             MULTI  RESTORE k ttl payload each, except the keys agents keep live (node
                    registrations, usage, report streams: the live copy is newer) and,
                    over a store with jobs, tokens and sessions (live wins)
                    DEL the live job keys the backup does not have
             EXEC   -> version above both; cordons of a lost store back; stops and ends
                       and deletions made after the backup kept (force); PUBLISH

Everything between MULTI and EXEC runs at one instant (Redis runs a transaction without
interleaving other clients), so the file is a snapshot of one moment: a job's hash, its
tasks, the ledger and the node bindings agree. Redis is busy for the time the DUMPs take
(milliseconds per MB). DUMP payloads carry Redis' RDB version: restore into the same or a
newer Redis.

File format (gzip-compressed JSON)::

    {"format": "pasture-backup/1", "created": <epoch s>, "redis_version": "7.0.15",
     "prefix": "pasture:", "keys": [{"key": str, "ttl_ms": int (0 = none), "dump": b64}]}

What a restore keeps and loses is in :func:`restore` and docs/ansible.md "Backup and
recovery". Errors: :class:`BackupError` (not a pasture backup, the store holds jobs and
no force, snapshot not consistent after MAX_TRIES reads).
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

from scheduler.states import JobState
from scheduler.store.store import DEFAULT_PREFIX, Store

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


# Keys the agents and the loop write on their own, of which the live copy is newer than
# any backup: kept as they are by a restore (the backup's copy is used only where the live
# store has none). Matched on the key without the prefix.
_LIVE_SUFFIXES = (":usage", ":reports", ":wake")
_LIVE_KEYS = {"reports:pending", "stats", "stats:cycle", "cluster:condition"}
# Keys that say the store holds jobs (was not lost): a restore over them needs --force.
_JOB_KEYS = {"jobs", "jobs:active", "ledger"}


def _opt(value: object) -> str | None:
    """A Redis reply as text (None stays None)."""
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _node_name(rest: str) -> str | None:
    """``node:<name>`` (the registration hash) -> name; None for other keys."""
    if rest.startswith("node:") and rest.count(":") == 1:
        return rest[5:]
    return None


def _job_name(rest: str) -> str | None:
    """``job:<name>`` (the job hash) -> name; None for other keys."""
    if rest.startswith("job:") and rest.count(":") == 1:
        return rest[4:]
    return None


def _kind(rest: str) -> str:
    """What a key (without the prefix) is to a restore: ``node`` (a registration hash),
    ``live`` (agents' and loop's own keys), ``version``, ``nodes``, ``token`` (API tokens
    and dashboard sessions), ``job`` (a job's keys, its indexes, the ledger), ``other``."""
    if _node_name(rest) is not None:
        return "node"
    if rest in _LIVE_KEYS or rest.startswith("usage:cluster:"):
        return "live"
    if rest.startswith("node:") and rest.endswith(_LIVE_SUFFIXES) and rest.count(":") == 2:
        return "live"
    if rest in ("version", "nodes"):
        return rest
    if rest.startswith(("token:", "dashboard:session:")) or rest == "token-names":
        return "token"
    if rest.startswith("job:") or rest in _JOB_KEYS or rest.startswith("jobs:"):
        return "job"
    return "other"


@dataclass(frozen=True)
class RestoreInfo(BackupInfo):
    """What a restore did beyond :class:`BackupInfo`: ``kept`` (requests made after the
    backup that the live store still showed and that were applied again, one sentence
    each) and ``lost`` (what was written after the backup and is not in the restored
    store, one sentence each)."""

    kept: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()


_JOB_SUFFIXES = ("", ":events", ":tasks", ":alloc")


@dataclass(frozen=True)
class _LiveJob:
    """What the live store held of one job before a forced restore: its state, stop
    request and creation time, and (for an ended job) the DUMPs of its keys and its
    expiry score, so that its end can be kept."""

    state: str | None
    stop: str | None
    created: str | None
    dumps: dict[str, tuple[int, bytes]]
    expiry: float | None


def _read_live_job(client: redis.Redis, dec: redis.Redis, prefix: str, name: str) -> _LiveJob:
    jk = f"{prefix}job:{name}"
    state, stop, created = (_opt(v) for v in dec.hmget(jk, "state", "stop_requested", "created"))
    dumps: dict[str, tuple[int, bytes]] = {}
    expiry = None
    if state and JobState(state).terminal:
        for suffix in _JOB_SUFFIXES:
            payload = client.dump(jk + suffix)
            if isinstance(payload, bytes):
                dumps[suffix] = (max(int(client.pttl(jk + suffix)), 0), payload)
        score = dec.zscore(f"{prefix}jobs:expiry", name)
        expiry = None if score is None else float(score)
    return _LiveJob(state, stop, created, dumps, expiry)


def _keep_live_end(client: redis.Redis, store: Store, name: str, live: _LiveJob) -> None:
    """Put back the records of a job that ended after the backup, as the live store had
    them: its allocation (the backup's) is released first, so that no node is bound to
    run it again."""
    store.release(name)
    jk = store.k("job", name)
    pipe = client.pipeline(transaction=True)
    for suffix in _JOB_SUFFIXES:
        if suffix in live.dumps:
            ttl, payload = live.dumps[suffix]
            pipe.restore(jk + suffix, ttl, payload, replace=True)
        else:
            pipe.delete(jk + suffix)
    pipe.srem(store.k("jobs", "active"), name)
    pipe.srem(store.k("jobs", "dirty"), name)
    if live.expiry is not None:
        pipe.zadd(store.k("jobs", "expiry"), {name: live.expiry})
    pipe.execute()


def _reapply(
    client: redis.Redis, store: Store, live_jobs: dict[str, _LiveJob], backup_jobs: set[str]
) -> tuple[list[str], list[str]]:
    """Apply again what the live store showed of what happened after the backup (see
    :func:`restore`); returns ``(kept, lost)`` sentences."""
    kept: list[str] = []
    lost: list[str] = []

    def restored(name: str) -> tuple[str | None, str | None]:
        state, created = store.r.hmget(store.k("job", name), "state", "created")
        return _opt(state), _opt(created)

    for name in sorted(live_jobs):
        live = live_jobs[name]
        was, was_created = restored(name) if name in backup_jobs else (None, None)
        if was is None or live.created is None or was_created != live.created:
            lost.append(f"job {name}: submitted after the backup; submit it again")
            continue
        if JobState(was).terminal:
            continue
        if live.state and JobState(live.state).terminal:
            _keep_live_end(client, store, name, live)
            kept.append(f"job {name}: {live.state} after the backup; kept {live.state}")
        elif live.stop:
            why = f"{live.stop} (requested after the backup; kept by restore)"
            store.request_stop(name, why)
            kept.append(f"job {name}: stop requested again ({why})")
    for name in sorted(backup_jobs - set(live_jobs)):
        was, _ = restored(name)
        if was is None:
            continue
        if not JobState(was).terminal:
            store.release(name)
            store.transition(name, "stopped", "deleted after the backup; kept deleted by restore")
        store.delete_job(name)
        kept.append(f"job {name}: deleted after the backup; deleted again")
    return kept, lost


def restore(client: redis.Redis, path: Path, *, force: bool = False) -> RestoreInfo:
    """Restore the backup in ``path`` while agents run (stop the loop and the API first).

    Two cases, told apart by whether the live store holds jobs (``job:*``, ``jobs``,
    ``ledger``):

    - **The store was lost** (no jobs; agents may have registered again, a token may have
      been made): restored without ``force``. The agents' own keys (node registrations
      and heartbeats, usage, report streams) stay as they are live; a node the backup had
      cordoned or draining is set so again; tokens made since are kept beside the
      backup's. Everything else written after the backup is lost (listed in ``lost``).
    - **The store holds jobs** (a restore over a working store, e.g. after a bad change):
      refused (BackupError) unless ``force``. With ``force`` the backup replaces the jobs,
      and what the live store shows of what happened after the backup is kept
      (``kept``): a job that stopped, succeeded or failed since keeps its end (its
      records as the live store had them; the backup's allocation of it is released, so
      no node runs it again); a stop requested since is requested again; a job deleted
      since is deleted again; tokens and dashboard sessions stay exactly as they are live
      (tokens revoked or rotated since stay so). Jobs submitted after the backup are
      listed in ``lost``.

    ``version`` ends above both the live and the backup's value, so that every cached
    view re-reads; the loop is woken. ``client`` must not decode responses
    (:func:`raw_client`).

    Raises:
        BackupError: not a backup, or the store holds jobs and ``force`` is False.
        redis.RedisError: the store failed; a RESTORE of a payload of a newer Redis raises
            redis.ResponseError after the keys before it were restored (a transaction is
            not rolled back).
    """
    doc = read_backup(path)
    prefix = str(doc.get("prefix") or DEFAULT_PREFIX)
    try:
        rows = [(r["key"], int(r["ttl_ms"]), base64.b64decode(r["dump"])) for r in doc["keys"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise BackupError(f"{path}: a key entry is malformed: {exc}") from exc
    live = {str(_opt(k)) for k in client.keys(prefix.encode() + b"*")}
    rests = {k: k[len(prefix) :] for k in live}
    has_jobs = any(_kind(r) == "job" for r in rests.values())
    if has_jobs and not force:
        n = sum(1 for r in rests.values() if _job_name(r) is not None)
        raise BackupError(
            f"the store holds {n} job(s) (it was not lost); pass --force to replace them with "
            "the backup (stops and ends requested since the backup are applied again)"
        )
    pool = client.connection_pool
    dec = redis.Redis(
        connection_pool=redis.ConnectionPool(
            connection_class=pool.connection_class,
            **{**pool.connection_kwargs, "decode_responses": True},
        )
    )
    live_jobs: dict[str, _LiveJob] = {}
    for r in rests.values():
        job = _job_name(r)
        if job is not None:
            live_jobs[job] = _read_live_job(client, dec, prefix, job)
    live_version = int(_opt(dec.get(prefix + "version")) or 0)

    tmp = f"{prefix}restore-tmp:"
    backup_nodes, backup_tokens, skipped = [], [], set()
    pipe = client.pipeline(transaction=True)
    for key, ttl, payload in rows:
        rest = key[len(prefix) :] if key.startswith(prefix) else key
        kind = _kind(rest)
        if kind == "node":
            backup_nodes.append(_node_name(rest))
            if key in live:  # the agent's registration is newer; keep the backup's aside
                pipe.restore(tmp + rest, 0, payload, replace=True)
                skipped.add(key)
                continue
        elif kind in ("live", "nodes") and key in live:
            skipped.add(key)
            if kind == "nodes":
                pipe.restore(tmp + rest, 0, payload, replace=True)
            continue
        elif kind == "token" and key in live:
            skipped.add(key)  # live wins (a rotation or a session since the backup)
            if rest == "token-names" and not has_jobs:
                pipe.restore(tmp + rest, 0, payload, replace=True)  # merged below
            continue
        elif kind == "token" and has_jobs:
            backup_tokens.append(rest)  # revoked, rotated or logged out since: not restored
            skipped.add(key)
            continue
        pipe.restore(key, ttl, payload, replace=True)
    restored = {key for key, _, _ in rows} - skipped
    stale = [
        k for k in live if k not in restored and _kind(rests[k]) in ("job", "other", "version")
    ]
    if stale:
        pipe.delete(*sorted(stale))
    pipe.execute()

    kept: list[str] = []
    lost: list[str] = []
    # nodes: the backup's members join the live set; admin states come back on a lost store
    if dec.exists(tmp + "nodes"):
        dec.sunionstore(prefix + "nodes", [prefix + "nodes", tmp + "nodes"])
    for node in backup_nodes:
        held = dec.hmget(tmp + f"node:{node}", "state", "state_reason")
        live_state = dec.hget(prefix + f"node:{node}", "state")
        if held[0] in ("cordoned", "draining") and not has_jobs and live_state == "ready":
            dec.hset(
                prefix + f"node:{node}", mapping={"state": held[0], "state_reason": held[1] or ""}
            )
            kept.append(f"node {node} is {held[0]} again, as in the backup")
    if dec.exists(tmp + "token-names"):
        for token_name, digest in dec.hgetall(tmp + "token-names").items():
            dec.hsetnx(prefix + "token-names", str(token_name), str(digest))
    leftovers = dec.keys(tmp + "*")
    if leftovers:
        dec.delete(*leftovers)
    restored_version = int(_opt(dec.get(prefix + "version")) or 0)
    dec.set(prefix + "version", max(restored_version, live_version) + 1)

    if has_jobs:
        backup_jobs = {j for k, _, _ in rows if (j := _job_name(k[len(prefix) :])) is not None}
        again, lost = _reapply(client, Store(dec, prefix), live_jobs, backup_jobs)
        kept += again
        if backup_tokens:
            kept.append(
                f"{len(backup_tokens)} token key(s) or session(s) of the backup revoked, rotated "
                "or ended since were not restored"
            )
    else:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(doc["created"])))
        lost.append(
            f"everything written after the backup ({when}): jobs submitted, stops requested, "
            "jobs that ended, cordons, token revocations and rotations since then (revoke "
            "such tokens again)"
        )
    dec.publish(prefix + "notify:loop", "restore")
    return RestoreInfo(
        len(rows),
        sum(len(p) for _, _, p in rows),
        Path(path),
        doc["created"],
        kept=tuple(kept),
        lost=tuple(lost),
    )


__all__ = [
    "FORMAT",
    "BackupError",
    "BackupInfo",
    "RestoreInfo",
    "backup",
    "raw_client",
    "read_backup",
    "restore",
]
