"""The agent against a real redis-server, with the process executor and real processes.
The loop is not running: the test commits placements itself (store + snapshot helpers)."""

import json
import time

import pytest
import redis

from scheduler.agent.agent import Agent
from scheduler.agent.executor import ExecutorError
from scheduler.agent.resources import detect_capacity, detect_gpus, usage
from scheduler.core.model import Bind, Decision, TaskPlacement
from scheduler.logpaths import job_log_dir
from scheduler.settings import AgentSettings
from scheduler.spec import parse_job_spec
from scheduler.store import Store
from scheduler.store.snapshot import commit_payload, take_snapshot
from tests.ports import task_ports


@pytest.fixture()
def store(redis_url):
    return Store(redis.Redis.from_url(redis_url, decode_responses=True))


def make_agent(store, tmp_path, redis_url, name="n1", **extra):
    settings = AgentSettings.model_validate(
        {
            "node_name": name,
            "address": "127.0.0.1",
            "redis": {"url": redis_url},
            "share_dir": str(tmp_path / "share"),
            "executor": "process",
            "work_dir": str(tmp_path / f"work-{name}"),
            "port_range": task_ports(32000, 32099),
            "resources": {"cpu": 4, "memory": "8Gi", "gpu": 2, "gpu_model": "fake"},
            "labels": {"pool": "test"},
            "stop_grace_s": 1,
            **extra,
        }
    )
    return Agent(settings, store=store)


def place(store, name, command, node="n1", replicas=1, **extra):
    store.create_job(
        parse_job_spec(
            {
                "name": name,
                "roles": {
                    "w": {
                        "replicas": replicas,
                        "command": command,
                        "resources": {"cpu": 1, "gpu": 1},
                    }
                },
                **extra,
            }
        )
    )
    store.transition(name, "queued", "queued")
    snap, ctx = take_snapshot(store)
    job = next(j for j in snap.pending if j.name == name)
    role = job.roles[0]
    bind = Bind(name, tuple(TaskPlacement("w", i, node, role.resources) for i in range(replicas)))
    ok, why = store.commit(ctx.version, commit_payload(Decision(binds=(bind,)), ctx))
    assert ok, why


def until(fn, timeout=15.0, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def test_register_reports_capacity_labels_and_usage(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    node = store.get_node("n1")
    assert (node.cpu_m, node.memory, node.gpu, node.gpu_model) == (4000, 8 * 2**30, 2, "fake")
    assert node.labels == {
        "pool": "test",
        "pasture.io/executor": "process",
        **agent.executor.node_labels(),  # what it enforces here (memory limit, kill unit)
    } and node.port_range == tuple(task_ports(32000, 32099))
    assert set(agent.executor.node_labels()) == {
        "pasture.io/memory-limit",
        "pasture.io/task-kill",
    }
    assert node.usage["memory_total"] > 0 and node.executor == "process"
    agent.heartbeat()
    assert store.get_node("n1").heartbeat >= node.heartbeat


def test_no_gpu_on_this_machine_means_zero_gpus():
    assert detect_gpus() == (0, None)
    assert detect_capacity().gpu == 0
    assert usage()["gpus"] == []


def test_runs_a_bound_task_logs_it_and_reports_the_exit_code(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place(
        store,
        "j",
        'echo "rank=$RANK of $WORLD_SIZE at $PASTURE_TASK_HOST:$PASTURE_TASK_PORT '
        'gpus=$CUDA_VISIBLE_DEVICES"; exit 4',
        replicas=2,
    )
    agent.reconcile()
    assert {t.state for t in store.tasks("j")} == {"running"}

    def finished():
        agent.reconcile()
        return all(t.done for t in store.tasks("j"))

    until(finished)
    t0, t1 = store.tasks("j")
    assert (t0.state, t0.exit_code) == ("failed", 4)
    log = (
        (job_log_dir(tmp_path / "share", "j", store.get_job("j").uid) / "w-1.log")
        .read_text()
        .splitlines()
    )
    assert log[0] == "=== attempt 1 on n1 ==="
    assert log[1] == f"rank=1 of 2 at 127.0.0.1:{t1.ports['main']} gpus={t1.gpus[0]}"
    assert t0.gpus != t1.gpus  # distinct devices
    assert json.loads((tmp_path / "work-n1/agent-state.json").read_text())["tasks"] == []


def test_stop_request_stops_the_process(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place(store, "j", "sleep 60")
    agent.reconcile()
    pid = json.loads(store.task("j", "w-0").handle)["pid"]
    t = store.task("j", "w-0")
    t.desired = "stop"
    store.update_tasks("j", [t])

    def stopped():
        agent.reconcile()
        return store.task("j", "w-0").state == "stopped"

    until(stopped)
    import psutil

    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_restarted_agent_adopts_instead_of_running_twice(store, tmp_path, redis_url):
    marker = tmp_path / "runs"
    first = make_agent(store, tmp_path, redis_url)
    first.register()
    place(store, "j", f"echo run >> {marker}; sleep 1.5; exit 5")
    first.reconcile()
    assert store.task("j", "w-0").state == "running"
    # the agent process dies here; a new one starts from the same work_dir
    second = make_agent(store, tmp_path, redis_url)
    assert list(second.local) == ["j/w-0#1"]

    def finished():
        second.reconcile()
        return store.task("j", "w-0").done

    until(finished)
    assert marker.read_text() == "run\n"  # ran once
    assert store.task("j", "w-0").exit_code == 5


def test_restarted_agent_kills_tasks_the_store_moved_on_from(store, tmp_path, redis_url):
    first = make_agent(store, tmp_path, redis_url)
    first.register()
    place(store, "j", "sleep 60")
    first.reconcile()
    pid = json.loads(store.task("j", "w-0").handle)["pid"]
    # while the agent was down the loop released the job (e.g. the node was lost)
    store.release("j")
    second = make_agent(store, tmp_path, redis_url)
    import psutil

    def gone():
        second.reconcile()
        return not second.local

    until(gone)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_task_running_in_store_but_unknown_locally_is_reported_lost_by_the_agent_restart(
    store, tmp_path, redis_url
):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place(store, "j", "sleep 60")
    store.report_task("j", "w-0", 1, "n1", "running")  # someone else's claim
    agent.reconcile()
    t = store.task("j", "w-0")
    assert t.state == "lost" and "without a record" in t.message
    assert t.cause == "agent_restart" and t.disrupted


def test_a_task_dies_with_its_agents_lease_and_is_reported_fenced(store, tmp_path, redis_url):
    import psutil

    agent = make_agent(store, tmp_path, redis_url, heartbeat_interval_s=0.2, lease_s=1.0)
    agent.register()  # renews the lease for 1 s; no heartbeat follows (a dead agent)
    place(store, "j", "sleep 60")
    agent.reconcile()
    pid = json.loads(store.task("j", "w-0").handle)["pid"]
    assert store.task("j", "w-0").state == "running"
    # nobody calls agent.fence(): the task's own watchdog must kill it when the lease ends
    until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie")
    until(lambda: agent.reconcile() or store.task("j", "w-0").done)
    t = store.task("j", "w-0")
    assert t.state == "lost" and t.cause == "fenced" and t.disrupted, t


def test_an_agent_without_a_lease_fences_its_tasks_and_starts_none(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url, heartbeat_interval_s=0.2, lease_s=0.5)
    agent.register()
    place(store, "j", "sleep 60")
    agent.reconcile()
    assert len(agent.local) == 1
    time.sleep(0.6)
    assert not agent.lease_held()
    assert agent.fence() == 1 and agent.fence() == 0  # once per task
    until(lambda: agent.reconcile() or not agent.local)
    assert store.task("j", "w-0").cause == "fenced"
    place(store, "k", "sleep 60", replicas=1)
    agent.reconcile()
    assert store.task("k", "w-0").state == "scheduled"  # not started without a lease
    agent.heartbeat()  # the store answers again: lease renewed, work resumes
    agent.reconcile()
    assert store.task("k", "w-0").state == "running"
    for t in agent.local.values():  # its processes and cgroup do not outlive the test
        agent.executor.stop(t.handle, 0)


def test_mpi_jobs_get_a_hostfile(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    place(store, "mpi", 'cat "$PASTURE_MPI_HOSTFILE"', replicas=2, mpi=True)

    def finished():
        agent.reconcile()
        return all(t.done for t in store.tasks("mpi"))

    until(finished)
    log = (
        (job_log_dir(tmp_path / "share", "mpi", store.get_job("mpi").uid) / "w-0.log")
        .read_text()
        .splitlines()
    )
    # two tasks on one host: one line with slots=2 (Open MPI 4.1 refuses repeated hosts)
    assert log[1:] == ["127.0.0.1 slots=2"]
    assert (tmp_path / "share/jobs/mpi/hostfile-1").exists()


def test_unwritable_share_fails_the_task_instead_of_crashing_the_agent(store, tmp_path, redis_url):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    # A file where the share's jobs/ directory should be: every mkdir below it fails, as
    # with a share mount that returns I/O errors.
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "jobs").write_text("not a directory")
    place(store, "j", "echo never", replicas=1)
    agent.reconcile()  # must not raise
    (task,) = store.tasks("j")
    assert task.state == "failed"
    assert "cannot write to the cluster share" in task.message


def test_a_task_the_executor_refuses_fails_with_the_reason_in_task_and_log(
    store, tmp_path, redis_url
):
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()

    def refuse(launch):
        raise ExecutorError("podman run failed: image not known")

    agent.executor.start = refuse
    place(store, "j", "echo never", replicas=1)
    agent.reconcile()
    (task,) = store.tasks("j")
    assert task.state == "failed" and task.exit_code is None
    assert task.message == "could not start: podman run failed: image not known"
    log = (
        (job_log_dir(tmp_path / "share", "j", store.get_job("j").uid) / "w-0.log")
        .read_text()
        .splitlines()
    )
    assert log == [
        "=== attempt 1 on n1 ===",
        "pasture: could not start the task: podman run failed: image not known",
    ]


def test_a_force_deleted_nodes_agent_renews_nothing_and_its_task_is_fenced(
    store, tmp_path, redis_url
):
    """Issue 32 item 7: ``node delete --force`` on a node whose agent still runs revokes
    its lease: the agent keeps heartbeating, is answered ``revoked``, renews nothing, and
    its real task dies by its lease before the loop may requeue it (``fence_until``)."""
    import psutil

    from scheduler.services.nodes import NodeService
    from scheduler.services.principal import Principal
    from scheduler.store.tokens import TokenRole

    agent = make_agent(store, tmp_path, redis_url, heartbeat_interval_s=0.2, lease_s=1.0)
    agent.register()
    assert store.get_node("n1").heartbeat_interval_s == 0.2
    place(store, "j", "sleep 60")
    agent.reconcile()
    pid = json.loads(store.task("j", "w-0").handle)["pid"]
    agent.heartbeat()
    NodeService(store).delete(Principal(name="root", role=TokenRole.ADMIN), "n1", force=True)
    node = store.get_node("n1")
    assert node.revoked and node.state == "cordoned"

    def gone() -> bool:
        agent.heartbeat()  # the agent runs on and keeps asking
        agent.reconcile()
        return not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"

    until(gone, timeout=5.0, step=0.2)
    assert store.now() <= node.fence_until  # dead before the loop may start a retry
    assert not agent.lease_held()
    until(lambda: agent.reconcile() or store.task("j", "w-0").done)
    t = store.task("j", "w-0")
    assert t.state == "lost" and t.cause == "fenced", t


def test_a_missing_working_dir_is_diagnosed_as_such(store, tmp_path, redis_url):
    """Issue 32 item 7: a role whose working_dir does not exist failed with exit 126 and
    was diagnosed ``not_executable``; a real task of the process executor now says so."""
    agent = make_agent(store, tmp_path, redis_url)
    agent.register()
    missing = tmp_path / "no" / "such" / "dir"
    store.create_job(
        parse_job_spec(
            {
                "name": "wd",
                "roles": {
                    "w": {
                        "command": "echo never",
                        "working_dir": str(missing),
                        "resources": {"cpu": 1},
                    }
                },
            }
        )
    )
    store.transition("wd", "queued", "queued")
    snap, ctx = take_snapshot(store)
    job = next(j for j in snap.pending if j.name == "wd")
    bind = Bind("wd", (TaskPlacement("w", 0, "n1", job.roles[0].resources),))
    ok, why = store.commit(ctx.version, commit_payload(Decision(binds=(bind,)), ctx))
    assert ok, why
    agent.reconcile()
    until(lambda: agent.reconcile() or store.task("wd", "w-0").done)
    t = store.task("wd", "w-0")
    assert t.state == "failed" and t.exit_code == 126, t
    assert t.diagnosis["kind"] == "working_dir_missing", t.diagnosis
    assert str(missing) in t.diagnosis["summary"]
