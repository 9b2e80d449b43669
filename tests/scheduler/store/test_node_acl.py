"""A node's Redis credential reaches only that node's records and tasks (issue 13 item 4).

Redis runs with the configuration the redis role renders (roles/redis/templates/
pasture.conf.j2, rendered here with Jinja2 and Ansible's ``hash`` filter), so these tests
check the ACL the role deploys, not a copy of it.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from pathlib import Path

import jinja2
import pytest
import redis
import yaml

from scheduler.agent.agent import Agent
from scheduler.core.model import Bind, Decision, TaskPlacement
from scheduler.dev import redis_server
from scheduler.loop import Loop
from scheduler.settings import AgentSettings, SchedulerSettings, VirtualClusterSettings
from scheduler.spec import parse_job_spec
from scheduler.store import NodeRecord, Store
from scheduler.store.acl import AGENT_COMMANDS, agent_rules, node_password, node_user
from scheduler.store.agent_store import NodeStore
from scheduler.store.reports import apply_node_reports
from scheduler.store.snapshot import commit_payload, take_snapshot
from scheduler.store.tokens import TokenStore

ROLE = Path(__file__).resolve().parents[3] / "roles" / "redis"
ADMIN_PW = "test-default-pw-0123456789"
SECRET = "test-agent-secret-0123456789"
NODES = ["n1", "n2"]


def render_role_conf(nodes: list[str]) -> str:
    """pasture.conf as the redis role renders it for ``nodes``."""
    env = jinja2.Environment(  # as Ansible's template module: trim_blocks
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True
    )
    env.filters["hash"] = lambda s, alg: hashlib.new(alg, str(s).encode()).hexdigest()
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()))
    variables.update(
        ansible_managed="rendered by test_node_acl.py",
        __redis_conf="/etc/redis/redis.conf",
        redis_bind_addresses=["127.0.0.1"],
        redis_password=ADMIN_PW,
        redis_agent_password=SECRET,
        redis_node_names=nodes,
    )
    return env.from_string((ROLE / "templates" / "pasture.conf.j2").read_text()).render(variables)


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("acl-redis")
    conf = base / "pasture.conf"
    conf.write_text(render_role_conf(NODES))
    with redis_server(base, config=conf, password=ADMIN_PW) as url:
        yield url


@pytest.fixture()
def admin(acl_redis: str) -> Store:
    client = redis.Redis.from_url(acl_redis, password=ADMIN_PW, decode_responses=True)
    client.flushdb()
    client.script_flush()  # agents must load their scripts themselves
    store = Store(client)
    store.apply_vcs([VirtualClusterSettings.model_validate({"name": "default"})])
    return store


def node_client(url: str, node: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, username=node_user(node), password=node_password(SECRET, node), decode_responses=True
    )


def test_the_role_renders_the_rules_of_scheduler_store_acl():
    lines = [ln for ln in render_role_conf(NODES).splitlines() if ln.startswith("user ")]
    assert len(lines) == len(NODES)
    for node, line in zip(NODES, lines, strict=True):
        words = shlex.split(line)
        assert words[1] == node_user(node)
        pw_hash = hashlib.sha256(node_password(SECRET, node).encode()).hexdigest()
        assert words[2:6] == ["reset", "on", f"#{pw_hash}", "resetchannels"]
        assert " ".join(words[6:]) == " ".join(agent_rules(node))
    assert {f"+{c}" for c in AGENT_COMMANDS} <= set(agent_rules("n1"))


def _bind(admin: Store, job: str, node: str) -> None:
    admin.create_job(parse_job_spec({"name": job, "roles": {"w": {"command": "sleep 30"}}}))
    admin.transition(job, "queued", "queued")
    snap, ctx = take_snapshot(admin)
    role = next(p for p in snap.pending if p.name == job).roles[0]
    bind = Bind(job, (TaskPlacement("w", 0, node, role.resources),))
    ok, detail = admin.commit(ctx.version, commit_payload(Decision(binds=(bind,)), ctx))
    assert ok, detail


def _register(url: str, node: str) -> NodeStore:
    ns = NodeStore(node_client(url, node), node)
    ns.register_node(NodeRecord(name=node, address="10.0.0.1", cpu_m=4000, memory=8 * 2**30))
    return ns


def test_a_node_credential_cannot_touch_tokens_jobs_vcs_or_other_nodes(acl_redis, admin):
    n1 = _register(acl_redis, "n1")
    _register(acl_redis, "n2")
    apply_node_reports(admin)
    token = TokenStore(admin.r).create("ops", "admin", [])
    assert token
    _bind(admin, "j2", "n2")
    r = n1.r
    forbidden = [
        ("SET", "pasture:token:forged", "x"),
        ("HSET", "pasture:token:forged", "role", "admin"),
        ("HSET", "pasture:job:j2", "user", "mallory"),
        ("HSET", "pasture:job:j2:tasks", "w-0", "{}"),
        ("HSET", "pasture:node:n2", "state", "lost"),
        ("XADD", "pasture:node:n2:reports", "*", "kind", "task"),
        ("SADD", "pasture:node:n1:tasks", "j2/w-0"),
        ("SREM", "pasture:nodes", "n2"),
        ("DEL", "pasture:node:n1:tasks"),
        ("HSET", "pasture:vcs", "evil", "{}"),
        ("HSET", "pasture:ledger", "j2/w-0", "{}"),
        ("INCR", "pasture:version"),
        ("PUBLISH", "pasture:notify:node:n2", "bindings"),
        ("FLUSHDB",),
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("CONFIG", "GET", "requirepass"),
        ("ACL", "LIST"),
        ("EVAL", "return redis.call('SET', 'pasture:token:x', 'y')", "0"),
    ]
    for cmd in forbidden:
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.execute_command(*cmd)
    keys = list(admin.r.scan_iter("pasture:token*"))
    assert keys
    for key in keys:
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.type(key)
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.hgetall(key)
    # a script loaded by the node runs with the node's permissions too
    sha = r.script_load("return redis.call('HSET', 'pasture:job:j2', 'user', 'mallory')")
    with pytest.raises(redis.exceptions.ResponseError, match="can.t access"):
        r.evalsha(sha, 0)
    with pytest.raises(redis.exceptions.NoPermissionError):
        TokenStore(r).create("forged", "admin", [])
    ps = r.pubsub()
    with pytest.raises(redis.exceptions.NoPermissionError):
        ps.subscribe("pasture:notify:node:n2")
        ps.get_message(timeout=1)
    ps.close()
    # nothing changed
    assert admin.get_job("j2").user == ""
    assert admin.get_node("n2").state == "ready"
    assert set(admin.vcs()) == {"default"}
    assert [t.name for t in TokenStore(admin.r).list()] == ["ops"]


def test_a_node_credential_runs_its_agent(acl_redis, admin):
    n1 = _register(acl_redis, "n1")
    assert "n1" in admin.r.smembers("pasture:nodes")
    assert n1.heartbeat("n1", {"cpu_percent": 5.0}) == "ready"
    _bind(admin, "j1", "n1")
    assert n1.node_bindings("n1") == [("j1", "w-0")]
    assert n1.task("j1", "w-0").node == "n1"
    launch = n1.launch("n1", "j1")  # its own launch record: what the agent needs of the job
    assert (launch.spec["name"], launch.attempt, launch.user) == ("j1", 1, "")
    assert [t.key for t in n1.tasks("j1")] == ["w-0"]
    assert admin.r.acl_dryrun(node_user("n1"), "HGETALL", "pasture:node:n1:launch:j1") == "OK"
    ps = n1.subscribe(n1.node_channel("n1"))
    ps.get_message(timeout=0.5)  # subscribing to its own channel is permitted
    admin.notify_node("n1", "bindings")
    msg = ps.get_message(timeout=2)
    assert msg is not None and msg["data"] == "bindings", msg
    ps.close()
    assert n1.report_task("j1", "w-0", 1, "n1", "running", handle="pid:1")
    assert admin.task("j1", "w-0").state == "scheduled"  # queued, not applied yet
    applied = apply_node_reports(admin)
    assert (applied.applied, applied.dropped) == (1, 0)
    t = admin.task("j1", "w-0")
    assert (t.state, t.handle) == ("running", "pid:1")
    assert admin.r.xlen(n1.reports_key()) == 0
    with pytest.raises(ValueError, match="only node 'n1'"):
        n1.report_task("j1", "w-0", 1, "n2", "failed")


def test_a_node_credential_reads_no_job_record_only_its_launch_records(acl_redis, admin):
    """Issue 13 item 4: a node reads no job's record (spec, user, sealed secrets), its own
    job's included, and only its own launch records; the release deletes them."""
    n1 = _register(acl_redis, "n1")
    _register(acl_redis, "n2")
    apply_node_reports(admin)
    admin.create_job(
        parse_job_spec({"name": "sec", "roles": {"w": {"command": "true"}}}),
        sealed_secrets="sealed-token-for-sec",
    )
    admin.transition("sec", "queued", "queued")
    snap, ctx = take_snapshot(admin)
    role = next(p for p in snap.pending if p.name == "sec").roles[0]
    bind = Bind("sec", (TaskPlacement("w", 0, "n2", role.resources),))
    assert admin.commit(ctx.version, commit_payload(Decision(binds=(bind,)), ctx))[0]
    _bind(admin, "mine", "n1")
    r = n1.r
    for key in ("pasture:job:sec", "pasture:job:mine", "pasture:job:sec:events"):
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.hget(key, "spec") if not key.endswith("events") else r.lrange(key, 0, -1)
        assert "no permissions" in admin.r.acl_dryrun(node_user("n1"), "HGETALL", key)
    # n2's launch record holds the sealed token; n1 can read neither it nor the job's
    n2_launch = NodeStore(node_client(acl_redis, "n2"), "n2").launch("n2", "sec")
    assert n2_launch.sealed_secrets == "sealed-token-for-sec"
    with pytest.raises(redis.exceptions.NoPermissionError):
        r.hgetall("pasture:node:n2:launch:sec")
    assert n1.launch("n1", "sec") is None  # none of its own for a job not bound to it
    assert n1.launch("n1", "mine").spec["roles"]["w"]["command"] == "sleep 30"
    admin.release("mine")
    assert n1.launch("n1", "mine") is None  # the release deleted it
    assert not admin.r.exists("pasture:node:n1:launch:mine")
    assert admin.r.exists("pasture:node:n2:launch:sec")


def _grow(job: str, key: str, node: str, attempt: int) -> dict:
    """A commit payload adding task ``key`` of ``job`` on ``node`` (scheduler/core/grow.py)."""
    index = int(key.rpartition("-")[2])
    alloc = {"job": job, "role": "w", "index": index, "attempt": attempt, "node": node}
    alloc |= {"cpu_m": 0, "memory": 0, "gpu": 0, "gpus": [], "ports": []}
    task = {"role": "w", "index": index, "attempt": attempt, "node": node}
    task |= {"state": "scheduled", "desired": "run"}
    one = {"key": key, "node": node, "alloc": alloc, "task": task}
    b = {"job": job, "attempt": attempt, "nodes": node, "tasks": [one]}
    return {"binds": [], "preemptions": [], "pending": {}, "grows": [b]}


def test_a_grow_writes_the_launch_record_of_the_node_it_reaches(acl_redis, admin):
    n2 = _register(acl_redis, "n2")
    _register(acl_redis, "n1")
    apply_node_reports(admin)
    _bind(admin, "g", "n1")
    assert n2.launch("n2", "g") is None
    ok, _ = admin.commit(admin.version(), _grow("g", "w-1", "n2", attempt=9))  # dropped
    assert ok and n2.launch("n2", "g") is None
    ok, _ = admin.commit(admin.version(), _grow("g", "w-1", "n2", attempt=1))
    assert ok and n2.launch("n2", "g").spec["name"] == "g"
    assert [t.key for t in n2.tasks("g")] == ["w-0", "w-1"]  # its peers, for discovery
    admin.release("g")
    assert not list(admin.r.scan_iter("pasture:node:*:launch:*"))


def test_the_loop_drops_a_report_on_another_nodes_task(acl_redis, admin, caplog):
    n1 = _register(acl_redis, "n1")
    _register(acl_redis, "n2")
    _bind(admin, "mine", "n1")
    _bind(admin, "theirs", "n2")
    n1.report_task("theirs", "w-0", 1, "n1", "failed", 1, "forged")
    n1.report_task("mine", "w-0", 2, "n1", "failed", 1, "wrong attempt")
    n1.report_task("mine", "w-0", 1, "n1", "scheduled", None, "not a reportable state")
    n1.report_task("mine", "w-0", 1, "n1", "succeeded", 0, "exited with code 0")
    with caplog.at_level("WARNING", logger="pasture.store.reports"):
        applied = apply_node_reports(admin)
    assert (applied.applied, applied.dropped) == (1, 3)
    assert admin.task("theirs", "w-0").state == "scheduled"
    assert admin.task("mine", "w-0").state == "succeeded"
    assert "dropped a report of node n1 on task theirs/w-0" in caplog.text
    assert admin.loop_stats()["reports_dropped"] == 3


def test_a_lost_node_that_heartbeats_comes_back_and_bumps_the_version(acl_redis, admin):
    n1 = _register(acl_redis, "n1")
    apply_node_reports(admin)
    admin.set_node_state("n1", "lost", "test")
    v = admin.version()
    assert n1.heartbeat("n1", {}) == "ready"
    assert apply_node_reports(admin).nodes == 1
    assert admin.version() == v + 1
    assert admin.get_node("n1").state == "ready"


def test_agent_and_loop_run_a_job_with_the_node_credential(acl_redis, admin, tmp_path):
    settings = AgentSettings.model_validate(
        {
            "node_name": "n1",
            "redis": {
                "url": acl_redis,
                "username": node_user("n1"),
                "password": node_password(SECRET, "n1"),
            },
            "share_dir": str(tmp_path / "share"),
            "executor": "process",
            "work_dir": str(tmp_path / "work"),
            "resources": {"cpu": 2, "memory": "2Gi"},
        }
    )
    agent = Agent(settings)
    assert isinstance(agent.store, NodeStore)
    agent.register()
    loop = Loop(admin, SchedulerSettings.model_validate({"loop": {"interval_s": 0.1}}))
    admin.create_job(parse_job_spec({"name": "acl", "roles": {"w": {"command": "exit 0"}}}))
    deadline = time.monotonic() + 20
    while (job := admin.get_job("acl")).state != "succeeded":
        assert time.monotonic() < deadline, (job, admin.tasks("acl"))
        loop.cycle()
        agent.heartbeat()
        agent.reconcile()
        time.sleep(0.05)
    assert json.loads(admin.r.hget("pasture:node:n1", "usage"))  # heartbeats arrived


def test_pending_set_holds_only_nodes_with_queued_reports(acl_redis, admin):
    n1 = _register(acl_redis, "n1")
    pending = "pasture:reports:pending"
    assert admin.r.smembers(pending) == {"n1"}
    apply_node_reports(admin)
    assert admin.r.smembers(pending) == set()  # settled: nothing queued
    assert apply_node_reports(admin).nodes == 0  # idle nodes are not read
    # a node may add any name (SADD only); odd names are dropped, never read as keys
    n1.r.sadd(pending, "n2", "bad name\n", "x:y")
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.r.srem(pending, "n1")
    apply_node_reports(admin)
    assert admin.r.smembers(pending) == set()
    # a report queued while the loop works keeps its node pending until applied
    n1.report_task("nojob", "w-0", 1, "n1", "running")
    assert admin.r.smembers(pending) == {"n1"}
    assert apply_node_reports(admin).dropped == 1
    assert admin.r.smembers(pending) == set()
