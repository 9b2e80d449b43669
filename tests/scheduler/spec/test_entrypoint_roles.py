"""Roles that run their image's own ENTRYPOINT (``entrypoint: true``, Kubernetes' container
without ``command``): the spec's rules, the Volcano translation, where such a role may run
(the core's node-selector filter, the submit-time fit check, the pending reason) and the
kubernetes and process executors' answers. The real podman run is in
tests/scheduler/agent/test_entrypoint_container.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.agent.executor import ExecutorError, TaskLaunch, executor_labels
from scheduler.agent.kubernetes import PodSettings, build_pod
from scheduler.agent.process import ProcessExecutor
from scheduler.core import Policy, ReasonKind, schedule
from scheduler.core.model import Node, Resources
from scheduler.spec import SpecError, parse_job_spec, unfittable_reason
from scheduler.spec.model import ENTRYPOINT_LABEL
from tests.factories import snapshot

IMAGE = "example.org/train:1"


def spec(role: dict, **job) -> dict:
    return {"name": "ep", "image": IMAGE, "roles": {"w": {"replicas": 2, **role}}, **job}


def volcano(container: dict) -> dict:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "ep"},
        "spec": {
            "tasks": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": IMAGE,
                                    "resources": {"requests": {"cpu": 1, "memory": "1Gi"}},
                                    **container,
                                }
                            ]
                        }
                    },
                }
            ]
        },
    }


def test_entrypoint_role_rules_name_the_field():
    ok = parse_job_spec(spec({"entrypoint": True, "args": ["--epochs", "3"]}))
    assert ok.roles["w"].entrypoint and ok.roles["w"].args == ["--epochs", "3"]
    assert ok.roles["w"].command is None
    cases = [
        ({}, "roles.w.command", "entrypoint: true"),
        ({"entrypoint": True, "command": "x"}, "roles.w.command", "not both"),
        ({"command": "x", "args": ["a"]}, "roles.w", "only with entrypoint: true"),
        ({"entrypoint": True, "working_dir": "rel"}, "roles.w.working_dir", "absolute"),
    ]
    for role, loc, says in cases:
        with pytest.raises(SpecError) as info:
            parse_job_spec(spec(role))
        (err,) = info.value.errors
        assert (err["loc"], says in err["msg"]) == (loc, True), err
    with pytest.raises(SpecError, match="needs an image"):
        parse_job_spec({"name": "ep", "roles": {"w": {"entrypoint": True}}})


def test_volcano_command_and_args_follow_kubernetes():
    # command + args: args appended to the command
    r = parse_job_spec(volcano({"command": ["python", "t.py"], "args": ["--lr", "0.1 x"]}))
    assert r.roles["w"].command == "python t.py --lr '0.1 x'" and not r.roles["w"].entrypoint
    # args alone: the image's ENTRYPOINT with these args (they replace its CMD)
    r = parse_job_spec(volcano({"args": ["--kv-store=dist_sync"], "workingDir": "/app"}))
    w = r.roles["w"]
    assert (w.entrypoint, w.command, w.args, w.working_dir) == (
        True,
        None,
        ["--kv-store=dist_sync"],
        "/app",
    )
    # neither: the image's ENTRYPOINT and CMD (Kubernetes treats [] as absent)
    for c in ({}, {"command": [], "args": []}):
        w = parse_job_spec(volcano(c)).roles["w"]
        assert (w.entrypoint, w.args) == (True, None)


def _node(name: str, kind: str) -> Node:
    return Node(name, Resources(8000, 16 * 2**30, 0), labels=executor_labels(kind))


def test_only_container_and_kubernetes_nodes_take_entrypoint_roles():
    job = parse_job_spec(spec({"entrypoint": True, "resources": {"cpu": 1}}))
    assert job.to_core().roles[0].node_selector == {ENTRYPOINT_LABEL: "true"}
    # submit: a cluster of process-executor nodes can never run it, and says why
    why = unfittable_reason(job, [_node("p1", "process"), _node("p2", "process")])
    assert why is not None and "ENTRYPOINT" in why and "process executor" in why
    assert unfittable_reason(job, [_node("p1", "process"), _node("c1", "container")]) is None
    assert unfittable_reason(job, [_node("k1", "kubernetes")]) is None
    # placement: the core's own node-selector filter keeps it off process nodes
    s = snapshot([_node("p1", "process"), _node("c1", "container")], [job.to_core()])
    (b,) = schedule(s, Policy(), 0.0).binds
    assert {p.node for p in b.placements} == {"c1"}
    d = schedule(snapshot([_node("p1", "process")], [job.to_core()]), Policy(), 0.0)
    why = d.pending["ep"]
    assert why.kind is ReasonKind.NO_FIT_EVER and ENTRYPOINT_LABEL in why.message
    # a command role still runs anywhere
    plain = parse_job_spec(spec({"command": "true", "resources": {"cpu": 1}}))
    assert unfittable_reason(plain, [_node("p1", "process")]) is None


def _launch(**kw) -> TaskLaunch:
    base = TaskLaunch(
        task_id="ep-w-0-a1",
        job="ep",
        role="w",
        index=0,
        attempt=1,
        node="n1",
        command="# pasture start-up\n",
        image=IMAGE,
        env={"RANK": "0"},
        cpu_m=1000,
        memory=2**30,
        gpus=[],
        log_path=Path("/share/jobs/ep/logs/w-0.log"),
        share_dir=Path("/share"),
        state_dir=Path("/tmp/ep-state"),
    )
    return replace(base, **kw)


def test_kubernetes_pod_of_an_entrypoint_role_has_no_command():
    settings = PodSettings(namespace="jobs", share_claim="share")
    pod = build_pod(_launch(entrypoint=True, args=["--epochs", "3"], working_dir="/app"), settings)
    (c,) = pod.spec.containers
    assert (c.command, c.args, c.working_dir, c.image) == (None, ["--epochs", "3"], "/app", IMAGE)
    pod = build_pod(_launch(entrypoint=True), settings)
    assert (pod.spec.containers[0].command, pod.spec.containers[0].args) == (None, None)
    pod = build_pod(_launch(command="python t.py"), settings)
    assert pod.spec.containers[0].command[:2] == ["/bin/sh", "-c"]


def test_process_executor_refuses_an_entrypoint_role(tmp_path):
    with pytest.raises(ExecutorError, match="process executor cannot run an image's ENTRYPOINT"):
        ProcessExecutor(limits="none").start(_launch(entrypoint=True, state_dir=tmp_path))
    assert not list(tmp_path.iterdir())  # nothing was started
