"""In-place upgrades of a store written by an older pasture, run once at loop and API start.

The store's ``schema`` key says which layout it holds (missing: 1). :func:`migrate` brings
it to :data:`SCHEMA`, one step at a time, each step idempotent (a step interrupted half
way is finished by the next start), and sets ``schema`` last. Two processes starting at
once (the loop and the API) take turns through the ``migrate:lock`` key.

Step 1 -> 2: **job names scoped per VC** (:mod:`scheduler.jobref`). Before, a job's name
was its identity in the whole cluster; now the key ``<name>.<vc>`` is (``<name>`` for VC
``default``, whose jobs keep their keys). Every job of another VC is renamed:

- ``job:<name>``, ``job:<name>:events``, ``:tasks``, ``:alloc`` -> ``job:<key>...``, the
  hash's ``name`` field set to the key;
- the members of ``jobs``, ``jobs:expiry`` (scores kept), ``jobs:active``, ``jobs:dirty``,
  ``jobs:changed``;
- the ledger's entries ``<name>/<role>-<index>`` (their JSON ``job`` too), the members of
  ``job:<key>:alloc`` and of every ``node:<node>:tasks``, and every launch record
  ``node:<node>:launch:<name>`` (its ``job`` field too);
- the job's directory on the share, ``<share>/jobs/<name>`` -> ``<share>/jobs/<key>``
  (its logs with it), when the share is given and the target does not exist yet.

Before the first change a backup of the whole store (:func:`scheduler.store.backup.backup`)
is written to ``backup_dir`` (``pasture admin restore`` takes it back); a store with
nothing to rename gets no backup. Each rename is logged. A task of a renamed job that runs
while the store is upgraded is seen by its agent under the new key: the agent stops the
old handle and starts the task again (stop the agents, or drain, to avoid that restart).
Queued reports that name the old key are dropped by the loop as stale (``stats``
``reports_dropped``); the task's next report counts.

Step 2 -> 3: **an index of jobs per VC** (``jobs:vc:<vc>``, :mod:`scheduler.store.jobs`).
Every member of ``jobs`` is added to its VC's index (the job hash's ``vc``, ``default``
when it has none) with the same score; adding is idempotent, nothing is renamed and no
backup is needed.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from scheduler.jobref import DEFAULT_VC, job_key
from scheduler.store.backup import backup
from scheduler.store.store import Store

log = logging.getLogger(__name__)

SCHEMA = 3
"""The layout this code writes: 2 = job keys per VC (``scheduler/jobref.py``), 3 = an
index of jobs per VC (``jobs:vc:<vc>``)."""

LOCK_S = 300
"""Seconds the ``migrate:lock`` key lives (a migrating process that died frees it)."""


@dataclass
class Migration:
    """What :func:`migrate` did: ``before``/``after`` (schema numbers), ``renamed``
    (old name -> job key), ``dirs`` (share directories moved, old -> new path),
    ``backup`` (the backup file written, None when nothing needed one)."""

    before: int
    after: int
    renamed: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, str] = field(default_factory=dict)
    backup: Path | None = None


def schema(store: Store) -> int:
    """The store's schema number (1 when the key is missing: a store written before it)."""
    return int(store.r.get(store.k("schema")) or 1)


def migrate(
    store: Store,
    *,
    share_dir: str | Path | None = None,
    backup_dir: str | Path | None = None,
    wait_s: float = 60.0,
) -> Migration:
    """Bring ``store`` to :data:`SCHEMA` in place (see the module docstring).

    Args:
        share_dir: the cluster share's root on this machine (``<share>/jobs/...``); None
            leaves the share as it is.
        backup_dir: where the backup is written before the first change
            (``pasture-schema-<n>-<epoch>.json.gz``, mode 0600); None: the upgrade is
            refused when anything needs renaming.
        wait_s: how long to wait for another process that is migrating the same store.

    Raises:
        RuntimeError: something needs renaming and there is no ``backup_dir``, or another
            process held the lock past ``wait_s``.
        OSError, redis.RedisError: the backup or the store failed (nothing is marked
            done; the next start carries on).
    """
    before = schema(store)
    if before >= SCHEMA:
        return Migration(before, before)
    lock = store.k("migrate", "lock")
    deadline = time.monotonic() + wait_s
    while not store.r.set(lock, str(os.getpid()), nx=True, ex=LOCK_S):
        if schema(store) >= SCHEMA:
            return Migration(before, schema(store))
        if time.monotonic() > deadline:
            raise RuntimeError(f"store migration: {lock} held past {wait_s} s by another process")
        time.sleep(0.2)
    try:
        if schema(store) >= SCHEMA:  # done meanwhile by the process we waited for
            return Migration(before, schema(store))
        out = Migration(before, SCHEMA)
        if before < 2:
            _job_keys(store, out, share_dir, backup_dir)
        _vc_indexes(store)
        store.r.set(store.k("schema"), str(SCHEMA))
        log.info(
            "store migrated from schema %d to %d: %d job(s) renamed, %d share dir(s) moved%s",
            before,
            SCHEMA,
            len(out.renamed),
            len(out.dirs),
            f", backup {out.backup}" if out.backup else "",
        )
        return out
    finally:
        store.r.delete(lock)


def _old_jobs(store: Store) -> dict[str, str]:
    """``{stored name: job key}`` of the jobs whose key differs from their name."""
    names = set(store.r.zrange(store.k("jobs"), 0, -1))
    for k in store.r.scan_iter(match=store.k("job", "*"), count=1000):
        rest = k[len(store.k("job", "")) :]
        if ":" not in rest:
            names.add(rest)
    out: dict[str, str] = {}
    for name in sorted(names):
        vc = store.r.hget(store.k("job", name), "vc") or DEFAULT_VC
        try:
            key = job_key(vc, name)
        except ValueError:  # already a key, or a name from before names were checked
            continue
        if key != name:
            out[name] = key
    return out


def _job_keys(
    store: Store,
    out: Migration,
    share_dir: str | Path | None,
    backup_dir: str | Path | None,
) -> None:
    todo = _old_jobs(store)
    if not todo:
        return
    if backup_dir is None:
        raise RuntimeError(
            f"store migration to schema {SCHEMA}: {len(todo)} job(s) to rename and no "
            "backup directory to write the store's backup to first"
        )
    Path(backup_dir).mkdir(parents=True, exist_ok=True)
    path = Path(backup_dir) / f"pasture-schema-{out.before}-{int(time.time())}.json.gz"
    pool = store.r.connection_pool
    raw = redis.Redis(
        connection_pool=redis.ConnectionPool(
            connection_class=pool.connection_class,
            **{**pool.connection_kwargs, "decode_responses": False},
        )
    )
    try:
        out.backup = backup(raw, path, store.p).path
    finally:
        raw.close()
    log.info("store migration: backup of the store before renaming jobs: %s", out.backup)
    nodes = sorted(store.r.smembers(store.k("nodes")))
    for old, new in todo.items():
        # the directory first: a start interrupted after it renames the records next time
        # (the job is still under its old name there), and no agent sees the new key
        # before its directory is in place
        if share_dir is not None:
            src, dst = Path(share_dir) / "jobs" / old, Path(share_dir) / "jobs" / new
            if src.is_dir() and not src.is_symlink() and not dst.exists():
                os.rename(src, dst)
                out.dirs[str(src)] = str(dst)
                log.info("store migration: share directory %s moved to %s", src, dst)
        _rename_job(store, old, new, nodes)
        out.renamed[old] = new
        log.info("store migration: job %r renamed %r (name scoped per VC)", old, new)


def _vc_indexes(store: Store) -> None:
    """Add every member of ``jobs`` to ``jobs:vc:<vc>`` with its score (step 2 -> 3)."""
    scored = store.r.zrange(store.k("jobs"), 0, -1, withscores=True)
    pipe = store.r.pipeline(transaction=False)
    for name, _ in scored:
        pipe.hget(store.k("job", name), "vc")
    vcs = pipe.execute()
    pipe = store.r.pipeline(transaction=False)
    for (name, score), vc in zip(scored, vcs, strict=True):
        pipe.zadd(store.k("jobs", "vc", vc or DEFAULT_VC), {name: score})
    pipe.execute()
    log.info("store migration: %d job(s) added to their VC's index", len(scored))


def _rename_job(store: Store, old: str, new: str, nodes: list[str]) -> None:
    """Every key and member of job ``old`` renamed ``new``, in one transaction."""
    r, k = store.r, store.k
    jk, nk = k("job", old), k("job", new)
    prefix = f"{old}/"
    ledger = {
        f: v
        for f, v in r.hscan_iter(k("ledger"), match=f"{old}/*", count=1000)
        if f.startswith(prefix)
    }
    node_tasks = {
        n: [m for m in r.smembers(k("node", n, "tasks")) if m.startswith(prefix)] for n in nodes
    }
    launches = [n for n in nodes if r.exists(k("node", n, "launch", old))]
    scores = {z: r.zscore(k(*z.split(":")), old) for z in ("jobs", "jobs:expiry")}
    pipe = r.pipeline(transaction=True)
    for suffix in ("", ":events", ":tasks", ":alloc"):
        if r.exists(jk + suffix):
            pipe.rename(jk + suffix, nk + suffix)
    pipe.hset(nk, "name", new)
    for z, score in scores.items():
        if score is not None:
            pipe.zrem(k(*z.split(":")), old)
            pipe.zadd(k(*z.split(":")), {new: score})
    for s in ("jobs:active", "jobs:dirty", "jobs:changed"):
        if r.sismember(k(*s.split(":")), old):
            pipe.srem(k(*s.split(":")), old)
            pipe.sadd(k(*s.split(":")), new)
    for f, v in ledger.items():
        entry = json.loads(v)
        if isinstance(entry, dict):
            entry["job"] = new
        pipe.hdel(k("ledger"), f)
        pipe.hset(k("ledger"), new + f[len(old) :], json.dumps(entry))
    allocs = [m for m in r.smembers(jk + ":alloc") if m.startswith(prefix)]
    if allocs:
        pipe.srem(nk + ":alloc", *allocs)
        pipe.sadd(nk + ":alloc", *[new + m[len(old) :] for m in allocs])
    for n, members in node_tasks.items():
        if members:
            pipe.srem(k("node", n, "tasks"), *members)
            pipe.sadd(k("node", n, "tasks"), *[new + m[len(old) :] for m in members])
    for n in launches:
        pipe.rename(k("node", n, "launch", old), k("node", n, "launch", new))
        pipe.hset(k("node", n, "launch", new), "job", new)
    pipe.incr(k("version"))  # every cached view of the ledger reads it again
    pipe.execute()


__all__ = ["SCHEMA", "Migration", "migrate", "schema"]
