"""Scale AKS pools with the queue (scheduler/k8s/autoscale.py): the real loop over a
real redis-server with the autoscaler's placeholder pods kept in an in-memory
``CoreV1Api`` (no cluster on the build machine); the pods it creates are checked with
kubernetes-validate and the client's own models."""

from __future__ import annotations

import pytest
import redis
from kubernetes import client as k8s

from scheduler.k8s.autoscale import (
    PLACEHOLDER_LABEL,
    PRIORITY_CLASS,
    Autoscaler,
    Pool,
    placeholder_name,
    pools_from_env,
)
from scheduler.loop import Loop
from scheduler.settings import SchedulerSettings
from scheduler.spec import parse_job_spec
from scheduler.store import NodeRecord, Store, TaskState
from tests.factories import Clock
from tests.k8s_manifests import validate

API = k8s.ApiClient()
GI = 2**30
A100 = Pool(
    name="a100",
    cpu_m=23_000,
    memory=200 * GI,
    gpu=1,
    gpu_model="A100",
    max_count=4,
    taints=(
        "nvidia.com/gpu=present:NoSchedule",
        "kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
    ),
    labels={"accelerator": "a100"},
)


class Cluster:
    """CoreV1Api stand-in for pods: create, list by label, delete; ``schedule`` plays the
    Kubernetes scheduler putting a pending pod on a node the autoscaler added."""

    def __init__(self) -> None:
        self.pods: dict[str, k8s.V1Pod] = {}
        self.created: list[k8s.V1Pod] = []

    def create_namespaced_pod(self, namespace: str, body: k8s.V1Pod) -> k8s.V1Pod:
        if body.metadata.name in self.pods:
            raise k8s.ApiException(status=409, reason="AlreadyExists")
        wire = API.sanitize_for_serialization(body)
        validate(wire)  # every object the loop sends passes the API's schema
        self.pods[body.metadata.name] = body
        self.created.append(body)
        return body

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> k8s.V1PodList:
        items = [p for p in self.pods.values() if label_selector in (p.metadata.labels or {})]
        return k8s.V1PodList(items=items)

    def delete_namespaced_pod(self, name: str, namespace: str, **kw) -> None:
        if self.pods.pop(name, None) is None:
            raise k8s.ApiException(status=404, reason="NotFound")

    def schedule(self, name: str, node: str) -> None:
        self.pods[name].spec.node_name = node


@pytest.fixture()
def env(redis_url):
    settings = SchedulerSettings.model_validate(
        {
            "redis": {"url": redis_url},
            "loop": {"interval_s": 0.1, "heartbeat_timeout_s": 30},
            "virtual_clusters": [
                {"name": "default", "guarantee": {"cpu": 64, "memory": "512Gi", "gpu": 8}}
            ],
        }
    )
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    store.apply_vcs(settings.virtual_clusters)
    store.register_node(  # the system pool's node: no GPU
        NodeRecord(name="aks-system-0", address="10.224.0.4", cpu_m=4000, memory=16 * GI)
    )
    clock = Clock()
    loop = Loop(store, settings, clock=clock)
    cluster = Cluster()
    loop.autoscale = Autoscaler((A100,), cluster, "pasture", clock=clock)
    return store, loop, cluster, clock


def submit(store, name, replicas=1, gpu=1):
    spec = {
        "name": name,
        "roles": {
            "trainer": {
                "replicas": replicas,
                "command": "python train.py",
                "resources": {"cpu": 8, "memory": "64Gi", "gpu": gpu},
            }
        },
    }
    store.create_job(parse_job_spec(spec), user="ann")


def test_a_job_only_a_pool_at_zero_fits_asks_the_autoscaler_and_lands_on_the_new_node(env):
    store, loop, cluster, clock = env
    submit(store, "train", replicas=2)
    loop.cycle()
    loop.cycle()
    job = store.get_job("train")
    assert job.state == "queued"
    assert job.pending_reason["message"].startswith(
        "waiting for the autoscaler to add a node to pool a100"
    )
    # the demand the autoscaler sees: one placeholder per task, with the task's shape
    names = sorted(cluster.pods)
    assert names == [placeholder_name("train", "trainer", i) for i in (0, 1)]
    wire = API.sanitize_for_serialization(cluster.pods[names[0]])
    spec = wire["spec"]
    (container,) = spec["containers"]
    want = {"cpu": "8000m", "memory": str(64 * GI), "nvidia.com/gpu": "1"}
    assert container["resources"] == {"requests": want, "limits": want}
    assert spec["nodeSelector"] == {"pasture/pool": "a100"}
    assert spec["priorityClassName"] == PRIORITY_CLASS
    assert "nodeName" not in spec  # the Kubernetes scheduler (and autoscaler) decide
    tolerations = {(t["key"], t.get("value"), t["effect"]) for t in spec["tolerations"]}
    assert tolerations == {
        ("nvidia.com/gpu", "present", "NoSchedule"),
        ("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule"),
    }
    # kept off nodes pasture schedules by the label their agents set, even those that
    # register later (no node of the pool is registered yet: no names)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expr,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expr == {"key": "pasture.io/registered", "operator": "DoesNotExist"}
    assert wire["metadata"]["labels"][PLACEHOLDER_LABEL] == "train"
    # no duplicates while it waits
    loop.cycle()
    assert len(cluster.created) == 2
    # the autoscaler adds two nodes; the placeholders land there; the agents register
    for i, name in enumerate(names):
        node = f"aks-a100-1234-vmss00000{i}"
        cluster.schedule(name, node)
        store.register_node(
            NodeRecord(
                name=node,
                address=f"10.224.1.{i}",
                cpu_m=23_000,
                memory=200 * GI,
                gpu=1,
                gpu_model="A100",
                labels={"pasture/pool": "a100", "accelerator": "a100"},
            )
        )
    clock.t += 1.0
    loop.cycle()
    assert cluster.pods == {}  # freed before the core placed the job there
    assert [p.metadata.name for p in cluster.created] == names  # none made again
    job = store.get_job("train")
    assert job.state == "scheduled"
    assert sorted(t.node for t in store.tasks("train")) == [
        "aks-a100-1234-vmss000000",
        "aks-a100-1234-vmss000001",
    ]


def test_registered_nodes_of_the_pool_are_kept_off(env):
    """A placeholder asks for a new node only: the pool's registered nodes (full) are
    excluded by node anti-affinity."""
    store, loop, cluster, clock = env
    store.register_node(
        NodeRecord(
            name="aks-a100-0",
            address="10.224.1.9",
            cpu_m=23_000,
            memory=200 * GI,
            gpu=1,
            gpu_model="A100",
            labels={"pasture/pool": "a100"},
        )
    )
    submit(store, "first")
    loop.cycle()
    loop.cycle()
    (t,) = store.tasks("first")
    store.report_task("first", t.key, t.attempt, t.node, TaskState.RUNNING, None)
    submit(store, "second")
    clock.t += 1
    loop.cycle()
    loop.cycle()
    assert "autoscaler" in store.get_job("second").pending_reason["message"]
    (pod,) = cluster.pods.values()
    spec = API.sanitize_for_serialization(pod)["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    live, named = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert live == {"key": "pasture.io/registered", "operator": "DoesNotExist"}
    assert named == {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["aks-a100-0"]}


def test_placeholders_go_when_the_queue_empties(env):
    store, loop, cluster, clock = env
    submit(store, "waits")
    loop.cycle()
    loop.cycle()
    assert len(cluster.pods) == 1
    store.request_stop("waits")
    clock.t += 1.0
    loop.cycle()
    assert store.get_job("waits").state == "stopped"
    loop.cycle()
    assert cluster.pods == {}


def test_a_job_no_pool_can_fit_keeps_its_reason_and_asks_for_nothing(env):
    store, loop, cluster, _ = env
    submit(store, "huge", gpu=8)  # 8 GPUs on one node: the a100 pool has 1 per node
    loop.cycle()
    loop.cycle()
    reason = store.get_job("huge").pending_reason["message"]
    assert "autoscaler" not in reason and cluster.pods == {}


def test_a_pool_at_its_max_count_asks_for_nothing(env):
    store, loop, cluster, clock = env
    for i in range(4):  # the pool is full (max_count 4) and busy
        store.register_node(
            NodeRecord(
                name=f"aks-a100-{i}",
                address=f"10.224.2.{i}",
                cpu_m=23_000,
                memory=200 * GI,
                gpu=1,
                gpu_model="A100",
                labels={"pasture/pool": "a100"},
            )
        )
    submit(store, "busy", replicas=4)
    loop.cycle()
    loop.cycle()
    for t in store.tasks("busy"):
        store.report_task("busy", t.key, t.attempt, t.node, TaskState.RUNNING, None)
    submit(store, "next")
    clock.t += 1
    loop.cycle()
    loop.cycle()
    assert store.get_job("next").state == "queued"
    assert "autoscaler" not in store.get_job("next").pending_reason["message"]
    assert cluster.pods == {}


def test_pools_are_read_from_the_environment():
    env = {
        "PASTURE_K8S_POOLS": '[{"name": "a100", "cpu_m": 23000, "memory": 1, "gpu": 1,'
        ' "max_count": 4, "taints": ["nvidia.com/gpu=present:NoSchedule"]}]'
    }
    (pool,) = pools_from_env(env)
    assert (pool.name, pool.max_count, pool.taints) == (
        "a100",
        4,
        ("nvidia.com/gpu=present:NoSchedule",),
    )
    assert pools_from_env({}) == ()
    with pytest.raises(ValueError, match="PASTURE_K8S_POOLS"):
        pools_from_env({"PASTURE_K8S_POOLS": '[{"name": "a100"}]'})
    assert Autoscaler.from_env({}) is None
