"""Issue 19 through the node report stream, under the per-node Redis ACL users: a node's
GPU health probe asks for a cordon and its failed tasks carry a diagnosis; the loop's
apply_node_reports applies both, and a node's malformed diagnosis is reduced or dropped."""

from __future__ import annotations

from scheduler.store.reports import apply_node_reports
from tests.scheduler.store.test_node_acl import (  # noqa: F401 - fixtures
    _bind,
    _register,
    acl_redis,
    admin,
)


def test_a_node_asks_for_its_own_cordon_and_the_loop_applies_it(acl_redis, admin):  # noqa: F811
    n1 = _register(acl_redis, "n1")
    apply_node_reports(admin)
    assert n1.request_cordon("n1", "cordoned by the GPU health probe: GPU 1 unhealthy: Xid 79")
    assert admin.get_node("n1").state == "ready"  # nothing until the loop applies it
    apply_node_reports(admin)
    node = admin.get_node("n1")
    assert node.state == "cordoned"
    assert node.state_reason == "cordoned by the GPU health probe: GPU 1 unhealthy: Xid 79"
    (event,) = admin.node_events("n1")
    assert event["state"] == "cordoned" and "Xid 79" in event["reason"]
    # an operator's drain is not turned into a cordon by a later request
    admin.set_node_state("n1", "draining", "drain by ops")
    n1.request_cordon("n1", "cordoned by the GPU health probe: GPU 0 unhealthy: Xid 48")
    apply_node_reports(admin)
    assert admin.get_node("n1").state == "draining" and len(admin.node_events("n1")) == 1


def test_diagnosis_travels_with_the_failed_report(acl_redis, admin):  # noqa: F811
    n1 = _register(acl_redis, "n1")
    apply_node_reports(admin)
    _bind(admin, "j1", "n1")
    _bind(admin, "j2", "n1")
    diag = {"kind": "cuda_oom", "summary": "CUDA out of memory", "retry": False, "hint": "h"}
    n1.report_task("j1", "w-0", 1, "n1", "failed", 1, "exited with code 1", diagnosis=diag)
    # a node is not trusted: extra fields go, long ones are cut, junk is dropped
    evil = {"kind": "x" * 500, "summary": "s" * 5000, "retry": 1, "extra": "drop me"}
    n1.report_task("j2", "w-0", 1, "n1", "failed", 1, "exited with code 1", diagnosis=evil)
    apply_node_reports(admin)
    (t1,) = admin.tasks("j1")
    assert t1.state == "failed" and t1.diagnosis == diag
    (t2,) = admin.tasks("j2")
    assert set(t2.diagnosis) == {"kind", "summary", "retry", "hint"}
    assert len(t2.diagnosis["kind"]) == 64 and len(t2.diagnosis["summary"]) == 500
    assert t2.diagnosis["retry"] is True
    # malformed JSON in the stream entry: the report applies without a diagnosis
    _bind(admin, "j3", "n1")
    n1.r.xadd(
        n1.reports_key(),
        {
            "kind": "task",
            "job": "j3",
            "key": "w-0",
            "attempt": "1",
            "state": "failed",
            "exit_code": "1",
            "message": "m",
            "handle": "",
            "cause": "",
            "diagnosis": "{not json",
        },
    )
    n1.r.sadd("pasture:reports:pending", "n1")
    apply_node_reports(admin)
    (t3,) = admin.tasks("j3")
    assert t3.state == "failed" and t3.diagnosis is None


def test_a_process_executor_handle_reaches_the_store_whole(acl_redis, admin):  # noqa: F811
    """A process task's handle names its cgroup directories (JSON, ~1 KiB on a hybrid
    cgroup host): the store keeps it whole, so readers of the stored handle (``pasture dev
    down`` stops tasks through it) can still parse it."""
    import json

    n1 = _register(acl_redis, "n1")
    apply_node_reports(admin)
    _bind(admin, "j1", "n1")
    base = "/sys/fs/cgroup/{}/user.slice/session-1.scope/pasture/" + "j1-" + "x" * 60 + "-w-0"
    handle = json.dumps(
        {
            "pid": 123,
            "create_time": 1.5,
            "exit_file": "/var/lib/pasture/tasks/" + "t" * 80 + "/exit",
            "fenced_file": "/var/lib/pasture/tasks/" + "t" * 80 + "/fenced",
            "cgroups": [base.format(c) for c in ("memory", "pids", "unified")],
            "marker": "PASTURE_TASK_UID=" + "u" * 32,
        }
    )
    assert len(handle) > 512
    n1.report_task("j1", "w-0", 1, "n1", "running", handle=handle)
    apply_node_reports(admin)
    (t1,) = admin.tasks("j1")
    assert json.loads(t1.handle)["cgroups"][2].endswith("-w-0")
