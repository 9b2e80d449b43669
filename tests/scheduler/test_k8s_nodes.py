"""What a Kubernetes node holds beyond pasture's ledger, and whether it takes new pods
(scheduler/k8s/nodes.py), over the client's own models deserialized from API JSON."""

from __future__ import annotations

import json

from kubernetes import client as k8s

from scheduler.core.model import Node, NodeState
from scheduler.core.resources import Resources
from scheduler.k8s.nodes import Held, as_kubelet_sees, node_facts, pod_requests

API = k8s.ApiClient()
MI = 2**20


def model(wire: dict, kind: str):
    return API.deserialize(json.dumps(wire), kind, "application/json")


def pod(name, node, containers, *, init=(), labels=None, phase="Running"):
    def c(n, cpu, mem, gpu=0, **kw):
        req = {"cpu": cpu, "memory": mem, **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
        return {"name": n, "image": "x", "resources": {"requests": req}, **kw}

    return model(
        {
            "metadata": {"name": name, "namespace": "pasture", "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "containers": [c(*x) for x in containers],
                "initContainers": [c(*x[:3], restartPolicy=x[3]) for x in init] or None,
            },
            "status": {"phase": phase},
        },
        "V1Pod",
    )


def node(name, *, unschedulable=None, taints=None, ready="True"):
    return model(
        {
            "metadata": {"name": name},
            "spec": {"unschedulable": unschedulable, "taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R"}]},
        },
        "V1Node",
    )


def test_a_pods_requests_count_sidecars_and_the_largest_init_container():
    p = pod(
        "p",
        "n",
        [("a", "1", "1Gi", 1), ("b", "500m", "512Mi")],
        init=[("fence", "10m", "48Mi", "Always"), ("setup", "4", "64Mi", None)],
    )
    # max(1.5 CPU + 10m sidecar, 4 CPU init); memory 1.5 GiB + 48 MiB
    assert pod_requests(p) == Held(4000, 1536 * MI + 48 * MI, 1)


def test_held_is_every_other_pod_and_only_the_sidecar_of_a_task_pod():
    pods = [
        pod("ds", "n", [("agent", "160m", "576Mi")]),
        pod("ph", "n", [("p", "8", "64Gi", 1)], labels={"pasture/placeholder": "j"}),
        pod(
            "task",
            "n",
            [("task", "8", "64Gi", 1)],
            init=[("fence", "10m", "48Mi", "Always")],
            labels={"pasture/job": "j"},
        ),
        pod("done", "n", [("x", "4", "1Gi")], phase="Succeeded"),
        pod("elsewhere", "m", [("x", "4", "1Gi")]),
    ]
    facts = node_facts([node("n"), node("m")], pods)
    assert facts["n"].held == Held(160 + 8000 + 10, (576 + 64 * 1024 + 48) * MI, 1)
    assert facts["m"].held == Held(4000, 1024 * MI, 0)
    assert facts["n"].schedulable


def test_cordon_noexecute_and_notready_make_a_node_take_nothing_new():
    cases = {
        "c": node("c", unschedulable=True),
        "t": node("t", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]),
        "s": node("s", taints=[{"key": "k", "effect": "NoSchedule"}]),  # tolerated by tasks
        "r": node("r", ready="Unknown"),
    }
    facts = node_facts(cases.values(), [])
    assert {n: f.schedulable for n, f in facts.items()} == {
        "c": False,
        "t": False,
        "s": True,
        "r": False,
    }
    assert "spec.unschedulable" in facts["c"].why and "NoExecute taint k=v" in facts["t"].why
    core = [Node(n, Resources(8000, 64 * 1024 * MI, 1)) for n in cases]
    seen = {n.name: n.state for n in as_kubelet_sees(core, facts)}
    assert seen == {
        "c": NodeState.CORDONED,
        "t": NodeState.CORDONED,
        "s": NodeState.READY,
        "r": NodeState.CORDONED,
    }


def test_the_core_sees_allocatable_less_what_others_hold_never_below_zero():
    facts = node_facts([node("n")], [pod("ds", "n", [("a", "9", "1Gi", 2)])])
    (seen,) = as_kubelet_sees([Node("n", Resources(8000, 4096 * MI, 1))], facts)
    assert seen.capacity == Resources(0, 3072 * MI, 0)
    (other,) = as_kubelet_sees([Node("x", Resources(1, 1, 1))], facts)
    assert other.capacity == Resources(1, 1, 1)  # no facts: unchanged
