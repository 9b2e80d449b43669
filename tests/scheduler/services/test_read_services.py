"""The services' read methods the dashboard uses, against a real redis-server with jobs
placed by real loop cycles: a user's token gets nothing of another VC's jobs."""

from __future__ import annotations

import pytest

from scheduler.loop import Loop
from scheduler.services.errors import ForbiddenError, NotFoundError
from scheduler.services.jobs import JobService
from scheduler.services.nodes import NodeAllocated, NodeService
from scheduler.services.records import spec_gpus
from scheduler.services.status import StatusService
from scheduler.services.usage import UsageService
from scheduler.services.vcs import VcService
from scheduler.settings import SchedulerSettings
from scheduler.store import NodeRecord, Store
from scheduler.store.tokens import TokenInfo, TokenRole

ADMIN = TokenInfo("root", TokenRole.ADMIN)
ALICE = TokenInfo("alice", TokenRole.USER, ("default",))
AGENT = TokenInfo("pulumi", TokenRole.AGENT)


def doc(name: str, vc: str) -> dict:
    return {
        "name": name,
        "vc": vc,
        "roles": {
            "w": {"replicas": 2, "resources": {"cpu": 1, "memory": "1Gi"}, "command": "true"}
        },
    }


@pytest.fixture()
def placed(redis_url):
    """One job of vc default (alice's) and one of vc research, both placed."""
    settings = SchedulerSettings.model_validate(
        {
            "redis": {"url": redis_url},
            "virtual_clusters": [{"name": n} for n in ("default", "research")],
        }
    )
    store = Store(settings.redis.client())
    store.apply_vcs(settings.virtual_clusters)
    store.register_node(NodeRecord(name="n1", address="10.0.0.1", cpu_m=8000, memory=32 << 30))
    jobs = JobService(store)
    jobs.submit(ADMIN, doc("mine", "default"))
    jobs.submit(ADMIN, doc("theirs", "research"))
    loop = Loop(store, settings)
    for _ in range(3):
        loop.cycle()
    assert {a.job for a in store.ledger().values()} == {"mine", "theirs.research"}
    return store


def test_tasks_of_answers_only_visible_jobs(placed):
    jobs = JobService(placed)
    mine = jobs.tasks_of(ALICE, ["mine", "theirs.research", "no-such-job"])
    assert set(mine) == {"mine"}
    assert [(t["role"], t["index"], t["node"]) for t in mine["mine"]] == [
        ("w", 0, "n1"),
        ("w", 1, "n1"),
    ]
    assert set(jobs.tasks_of(ADMIN, ["mine", "theirs.research"])) == {"mine", "theirs.research"}
    assert jobs.tasks_of(ALICE, []) == {}
    with pytest.raises(ForbiddenError):
        jobs.tasks_of(AGENT, ["mine"])


def test_node_allocated_sums_name_no_job(placed):
    nodes = NodeService(placed)
    both = NodeAllocated(cpu_m=4000, memory=4 << 30, gpu=0, tasks=4)
    assert nodes.allocated(ALICE) == {"n1": both}  # the same sums for every caller
    assert nodes.allocated(ADMIN, "n1") == {"n1": both}
    with pytest.raises(NotFoundError):
        nodes.allocated(ALICE, "nope")
    held = nodes.allocations(ALICE, "n1")
    assert {a.job for a in held["tasks"]} == {"mine"} and held["others"]["tasks"] == 2


def test_vc_names_and_clock(placed):
    vcs = VcService(placed)
    assert vcs.names(ADMIN) == ["default", "research"]
    assert vcs.names(ALICE) == ["default"]
    with pytest.raises(ForbiddenError):
        vcs.names(AGENT)
    assert abs(StatusService(placed).now() - placed.now()) < 1


def test_usage_windows(placed):
    placed.heartbeat("n1", {"cpu_percent": 40.0, "memory_used": 1, "memory_total": 4})
    usage = UsageService(placed)
    got = usage.node(ALICE, "n1", 600)
    assert got.window_s == 600 and [(s.cpu, s.mem, s.gpu) for s in got.samples] == [
        (40.0, 25.0, None)
    ]
    assert got.samples[0].t <= got.now
    cluster = usage.cluster(ALICE, 10**6)
    assert cluster.window_s == 7200 and cluster.samples[0].cpu == 40.0
    with pytest.raises(NotFoundError):
        usage.node(ALICE, "nope", 600)
    with pytest.raises(ForbiddenError):
        usage.cluster(AGENT, 600)


def test_spec_gpus_one_definition():
    from scheduler.api.dashboard import views
    from scheduler.cli import views as cli_views

    spec = {
        "roles": {
            "ps": {"replicas": 2, "resources": {"cpu": 1}},
            "worker": {"replicas": 4, "resources": {"gpu": 2}},
            "eval": {"resources": {"gpu": 1}},  # replicas defaults to 1
        }
    }
    assert spec_gpus(spec) == 9 and spec_gpus({}) == 0
    assert cli_views.spec_gpus is spec_gpus and views.spec_gpus is spec_gpus
