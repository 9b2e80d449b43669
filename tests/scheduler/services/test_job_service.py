"""JobService against a real redis-server: parsing, fit check cache, VC-merged listing."""

from __future__ import annotations

import pytest

from scheduler.services.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidSpecError,
    NotFoundError,
)
from scheduler.services.jobs import JobService, parse_document
from scheduler.settings import SchedulerSettings
from scheduler.store import NodeRecord, Store
from scheduler.store.tokens import TokenInfo, TokenRole

ADMIN = TokenInfo("root", TokenRole.ADMIN)
CAROL = TokenInfo("carol", TokenRole.USER, ("default", "research"))


def doc(name: str, vc: str = "default", cpu: int | str = 1) -> dict:
    return {
        "name": name,
        "vc": vc,
        "roles": {
            "w": {"replicas": 2, "resources": {"cpu": cpu, "memory": "1Gi"}, "command": "true"}
        },
    }


@pytest.fixture()
def store(redis_url) -> Store:
    settings = SchedulerSettings.model_validate(
        {
            "redis": {"url": redis_url},
            "virtual_clusters": [{"name": n} for n in ("default", "research", "other")],
        }
    )
    s = Store(settings.redis.client())
    s.apply_vcs(settings.virtual_clusters)
    s.register_node(NodeRecord(name="small", address="10.0.0.1", cpu_m=8000, memory=32 << 30))
    return s


@pytest.mark.parametrize(
    ("body", "ctype", "error"),
    [
        (b"a: [1", None, BadRequestError),
        (b"{", "application/json", BadRequestError),
        (b"\xff", None, BadRequestError),
        (b"  \n", None, BadRequestError),
        (b"[1, 2]", None, InvalidSpecError),
    ],
)
def test_parse_document_errors(body, ctype, error):
    with pytest.raises(error) as info:
        parse_document(body, ctype)
    assert "job spec" in info.value.message


def test_parse_document_reads_yaml_and_json():
    assert parse_document(b"name: x\n") == {"name": "x"}
    assert parse_document(b'{"name": "x"}', "application/json; charset=utf-8") == {"name": "x"}


def test_never_fits_is_confirmed_against_fresh_nodes(store):
    jobs = JobService(store, node_cache_s=3600)
    jobs.submit(ADMIN, doc("fits"))  # caches the cluster shape: one 8-core node
    with pytest.raises(InvalidSpecError) as info:
        jobs.submit(ADMIN, doc("wide", cpu=16))
    assert "small" in info.value.message and "cpu 16" in info.value.message
    store.register_node(NodeRecord(name="big", address="10.0.0.2", cpu_m=64000, memory=64 << 30))
    assert jobs.submit(ADMIN, doc("wide", cpu=16))["state"] == "submitted"


def test_spec_errors_keep_the_field_path(store):
    with pytest.raises(InvalidSpecError) as info:
        JobService(store).submit(ADMIN, doc("neg", cpu=-1))
    assert info.value.errors[0]["loc"] == ["roles", "w", "resources", "cpu"]
    assert store.get_job("neg") is None


def test_duplicate_and_forbidden(store):
    jobs = JobService(store)
    jobs.submit(CAROL, doc("a"))
    with pytest.raises(ConflictError):
        jobs.submit(CAROL, doc("a"))
    with pytest.raises(ForbiddenError):
        jobs.submit(CAROL, doc("b", vc="other"))
    with pytest.raises(ForbiddenError):
        jobs.submit(TokenInfo("n", TokenRole.AGENT), doc("c"))


def test_listing_merges_a_users_vcs_newest_first(store):
    jobs = JobService(store)
    for name, vc in [
        ("d1", "default"),
        ("r1", "research"),
        ("o1", "other"),
        ("d2", "default"),
        ("r2", "research"),
    ]:
        jobs.submit(ADMIN, doc(name, vc=vc))
    page = jobs.list(CAROL)
    assert [j["name"] for j in page["items"]] == ["r2", "d2", "r1", "d1"]
    assert page["total"] == 4
    assert [j["name"] for j in jobs.list(CAROL, limit=2, offset=1)["items"]] == ["d2", "r1"]
    assert [j["name"] for j in jobs.list(CAROL, vc="research")["items"]] == ["r2", "r1"]
    assert jobs.list(CAROL, vc="other")["items"] == []
    assert len(jobs.list(ADMIN)["items"]) == 5
    with pytest.raises(NotFoundError):
        jobs.get(CAROL, "o1")


def test_stop_of_a_finished_job_changes_nothing(store):
    jobs = JobService(store)
    jobs.submit(ADMIN, doc("done"))
    store.transition("done", "succeeded", "all tasks succeeded")
    assert jobs.stop(ADMIN, "done")["state"] == "succeeded"
    assert store.get_job("done").stop_requested == ""


def test_a_raw_pydantic_error_keeps_its_field_path(store, monkeypatch):
    from pydantic import BaseModel

    from scheduler.services import backend

    class Strict(BaseModel):
        replicas: int

    monkeypatch.setattr(backend, "parse_job", lambda d: Strict.model_validate(d))
    with pytest.raises(InvalidSpecError) as info:
        JobService(store).validate({"replicas": "many"})
    assert info.value.errors[0]["loc"] == ["replicas"]


def test_a_job_for_an_unknown_vc_is_refused_at_submit(store):
    with pytest.raises(InvalidSpecError) as info:
        JobService(store).submit(ADMIN, doc("lost", vc="nowhere"))
    assert info.value.errors[0]["loc"] == ["vc"]
    assert "nowhere" in info.value.errors[0]["msg"]
    assert store.get_job("lost") is None


def test_submit_answers_the_warnings_of_a_foreign_format(store):
    openpai = {
        "protocolVersion": 2,
        "name": "hello_pai",
        "type": "job",
        "description": "says hello",
        "prerequisites": [{"type": "dockerimage", "name": "img", "uri": "debian:12"}],
        "taskRoles": {"main": {"instances": 1, "dockerImage": "img", "commands": ["true"]}},
    }
    job = JobService(store).submit(ADMIN, openpai)
    assert job["name"] == "hello-pai"
    assert any("description" in w for w in job["warnings"])
    assert store.get_job("hello-pai").spec["roles"]["main"]["command"] == "true"
    native = JobService(store).submit(ADMIN, doc("plain"))
    assert native["warnings"] == []


def test_a_maro_schedule_stores_one_job_per_name_or_none(store):
    schedule = {
        "mode": "process",
        "name": "sched",
        "job_names": ["one", "two"],
        "components": {"actor": {"num": 2, "command": "true"}},
    }
    jobs = JobService(store)
    out = jobs.submit(ADMIN, schedule)
    assert out["jobs"] == ["one", "two"]
    assert store.get_job("two").spec["roles"]["actor"]["replicas"] == 2
    again = {**schedule, "job_names": ["three", "two"]}
    with pytest.raises(ConflictError):
        jobs.submit(ADMIN, again)
    assert store.get_job("three") is None  # checked before any was stored


def test_parse_document_refuses_an_alias_bomb_as_a_bad_request():
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    with pytest.raises(BadRequestError, match="aliases"):
        parse_document(bomb.encode())
    with pytest.raises(BadRequestError, match="nested deeper"):
        parse_document(b"[" * 3000 + b"]" * 3000, "application/json")


def test_a_cpu_only_role_with_a_gpu_model_is_checked_like_the_core_does(store):
    """The core's gpu-model filter applies to a role with gpu 0 too: submit agrees."""
    jobs = JobService(store, node_cache_s=0)
    cpu_only = doc("cpu-model")
    cpu_only["roles"]["w"]["resources"]["gpu_model"] = "A100"
    with pytest.raises(InvalidSpecError, match="A100"):
        jobs.submit(ADMIN, cpu_only)
    store.register_node(
        NodeRecord(name="a100", address="10.0.0.2", cpu_m=8000, memory=32 << 30, gpu_model="A100")
    )
    assert jobs.submit(ADMIN, cpu_only)["state"] == "submitted"
