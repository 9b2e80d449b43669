"""Jobs are listed per VC from the VC's own index (issue 32 item 5): a tenant's listing
reads no key of another tenant's jobs, so one tenant's many jobs cost another's listing
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from scheduler.store import Store
from scheduler.store.migrate import SCHEMA, migrate, schema


@contextmanager
def keys_read(store: Store) -> Iterator[list[str]]:
    """Every key named by a command the store's client sends inside the block (direct
    commands and pipelines alike)."""
    seen: list[str] = []
    client = store.r
    direct = client.execute_command
    pipeline = client.pipeline

    def record(args: tuple[object, ...]) -> None:
        seen.extend(str(a) for a in args[1:] if str(a).startswith(store.p))

    def execute_command(*args: object, **kwargs: object) -> object:
        record(args)
        return direct(*args, **kwargs)

    def traced_pipeline(*args: object, **kwargs: object) -> redis.client.Pipeline:
        pipe = pipeline(*args, **kwargs)
        run = pipe.execute

        def execute(*a: object, **kw: object) -> list[object]:
            for cmd_args, _ in pipe.command_stack:
                record(cmd_args)
            return run(*a, **kw)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    client.execute_command = execute_command  # type: ignore[method-assign]
    client.pipeline = traced_pipeline  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del client.execute_command
        del client.pipeline


def _fill(store: Store, job_spec) -> None:
    for i in range(30):
        store.create_job(job_spec(f"flood-{i}"), user="alice")
    for i in range(3):
        store.create_job(job_spec(f"mine-{i}", vc="research"), user="bob")


def test_a_listing_of_one_vc_reads_no_key_of_another_vcs_jobs(store, job_spec):
    _fill(store, job_spec)
    for kwargs in ({}, {"state": "submitted"}, {"user": "bob"}, {"limit": 2, "offset": 1}):
        with keys_read(store) as seen:
            page, total = store.list_jobs(vcs=["research"], **kwargs)
        names = [j.name for j in page]
        if "limit" in kwargs:
            assert names == ["mine-1.research", "mine-0.research"] and total == 3
        else:
            assert names == ["mine-2.research", "mine-1.research", "mine-0.research"]
            assert total == 3, kwargs
        assert seen, "the wrapper saw the listing's commands"
        # neither another VC's job hashes nor the index of every job
        assert not [k for k in seen if "flood-" in k], (kwargs, seen)
        assert store.k("jobs") not in seen and store.k("jobs", "vc", "default") not in seen


def test_a_listing_of_several_vcs_merges_their_indexes_newest_first(store, job_spec):
    store.create_job(job_spec("a"))
    store.create_job(job_spec("b", vc="research"))
    store.create_job(job_spec("c", vc="other"))
    store.create_job(job_spec("d"))
    page, total = store.list_jobs(vcs=["default", "research"])
    assert [j.name for j in page] == ["d", "b.research", "a"] and total == 3
    page, total = store.list_jobs(vcs=["research", "default"], offset=1, limit=1)
    assert [j.name for j in page] == ["b.research"] and total == 3
    assert store.list_jobs(vcs=[]) == ([], 0)


def test_a_deleted_job_leaves_its_vcs_index(store, job_spec):
    store.create_job(job_spec("gone", vc="research"))
    store.transition("gone.research", "stopped", "stopped")
    store.delete_job("gone.research")
    assert store.r.zcard(store.k("jobs", "vc", "research")) == 0
    assert store.list_jobs(vcs=["research"]) == ([], 0)


def test_a_store_without_the_vc_index_gets_it_on_upgrade(store, job_spec):
    _fill(store, job_spec)
    # the layout of schema 2: no per-VC indexes
    store.r.delete(store.k("jobs", "vc", "default"), store.k("jobs", "vc", "research"))
    store.r.set(store.k("schema"), "2")
    assert store.list_jobs(vcs=["research"]) == ([], 0)
    done = migrate(store)  # nothing to rename: no backup directory needed
    assert (done.before, done.after, done.renamed, done.backup) == (2, SCHEMA, {}, None)
    assert schema(store) == SCHEMA
    page, total = store.list_jobs(vcs=["research"])
    assert [j.name for j in page] == ["mine-2.research", "mine-1.research", "mine-0.research"]
    assert total == 3
    assert store.list_jobs(vcs=["default"])[1] == 30
    # scores kept: the merged order is the creation order, as ``jobs`` has it
    assert [j.name for j in store.list_jobs(vcs=["default", "research"], limit=33)[0]] == [
        j.name for j in store.list_jobs(limit=33)[0]
    ]
