"""pasture sees each AKS node as the kubelet sees it (issue 35): the real loop (with its
autoscaler and informers), real agents with the real kubernetes executor, over a real
redis-server, against :class:`tests.k8s_standin.KubeStandIn` (kube-scheduler binding,
kubelet admission, cluster autoscaler, drains and Spot evictions)."""

from __future__ import annotations

import time

import pytest
import redis

from scheduler.agent.agent import Agent
from scheduler.agent.kubernetes import KubernetesExecutor, PodSettings
from scheduler.k8s.autoscale import Autoscaler, Pool, aks_allocatable, pools_from_env
from scheduler.k8s.nodes import REGISTERED_LABEL, KubeNodes
from scheduler.loop import Loop
from scheduler.settings import AgentSettings, SchedulerSettings
from scheduler.spec import parse_job_spec
from scheduler.store import Store
from tests.factories import Clock
from tests.k8s_standin import KubeStandIn

GI = 2**30
MI = 2**20
# pasture's DaemonSets on a GPU node (agent, device plugin...: 160m / 576Mi per the issue)
# and kube-system's (kube-proxy, azure CNI, CSI drivers)
DAEMONSETS = (("pasture-agent", 160, 576 * MI), ("kube-proxy", 100, 128 * MI))
NODE = {"cpu_m": 23_660, "memory": 200 * GI, "gpu": 1}  # NC24ads_A100_v4, real allocatable
TAINTS = ("nvidia.com/gpu=present:NoSchedule",)


class Aks:
    """One AKS cluster with a GPU pool ``a100`` (0..max_count nodes) and pasture on it."""

    def __init__(
        self,
        redis_url: str,
        tmp_path,
        max_count: int = 4,
        hold_s: float = 120.0,
        agent_extra: dict | None = None,
        share_claim: str | None = None,
    ):
        self.tmp = tmp_path
        self.agent_extra = agent_extra or {}  # more agent settings (task_users...)
        self.share_claim = share_claim
        self.redis_url = redis_url
        self.hold_s = hold_s
        self.kube = KubeStandIn()
        self.kube.add_pool(
            "a100", max_count=max_count, **NODE, taints=TAINTS, daemonsets=DAEMONSETS
        )
        settings = SchedulerSettings.model_validate(
            {
                "redis": {"url": redis_url},
                "loop": {"interval_s": 0.1, "heartbeat_timeout_s": 30},
                "virtual_clusters": [
                    {"name": "default", "guarantee": {"cpu": 512, "memory": "4Ti", "gpu": 32}}
                ],
            }
        )
        self.store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
        self.store.apply_vcs(settings.virtual_clusters)
        self.clock = Clock()
        self.loop = Loop(self.store, settings, clock=self.clock)
        self.loop._health.node_gone = self.kube.nodes_gone
        pool = Pool(
            name="a100",
            cpu_m=NODE["cpu_m"],
            memory=NODE["memory"],
            gpu=1,
            daemonset_cpu_m=sum(c for _, c, _ in DAEMONSETS),
            daemonset_memory=sum(m for _, _, m in DAEMONSETS),
            max_count=max_count,
            taints=TAINTS,
        )
        self.informers = KubeNodes(self.kube, events_namespace="pasture")
        self.loop.autoscale = Autoscaler(
            (pool,), self.kube, "pasture", clock=self.clock, nodes=self.informers
        )
        self.agents: dict[str, Agent] = {}
        self.exec_clock = Clock()

    def close(self) -> None:
        self.informers.stop()

    def add_pool_node(self, name: str) -> None:
        """A node of pool ``a100`` that is there already (not one the autoscaler adds)."""
        self.kube.add_node(
            name, **NODE, taints=TAINTS, daemonsets=DAEMONSETS, labels={"pasture/pool": "a100"}
        )

    def sync(self) -> None:
        """Wait until the loop's informers have seen every change of the API."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with self.kube.cond:
                last = {
                    k: max((e[0] for e in self.kube.events if e[1] == k), default=0)
                    for k in ("pod", "node", "event")
                }
            seen = {
                "pod": int(self.informers.pods.resource_version or 0),
                "node": int(self.informers.nodes.resource_version or 0),
                "event": int(self.informers.events.resource_version or 0),
            }
            if self.informers.synced and all(seen[k] >= last[k] for k in last):
                return
            time.sleep(0.01)
        raise AssertionError("informers did not catch up")

    def agent(self, node: str) -> Agent:
        """The agent of ``node`` (the DaemonSet's pod), registering it on first call."""
        if node not in self.agents:
            work = self.tmp / f"work-{node}"
            settings = AgentSettings.model_validate(
                {
                    "node_name": node,
                    "address": "10.224.0.1",
                    "redis": {"url": self.redis_url},
                    "share_dir": str(self.tmp / "share"),
                    "executor": "process",
                    "work_dir": str(work),
                    "port_range": [32000, 32099],
                    "stop_grace_s": 0,
                    **self.agent_extra,
                }
            )
            executor = KubernetesExecutor(
                settings=PodSettings(
                    share_claim=self.share_claim, agent_dir=str(work), pending_timeout_s=600
                ),
                api=self.kube,
                node_objects=True,
                capacity_wait_s=0,
                disruption_hold_s=self.hold_s,
                clock=self.exec_clock,
            )
            agent = Agent(settings, store=self.store, executor=executor)
            agent.register()
            self.agents[node] = agent
        return self.agents[node]

    def step(self, n: int = 1) -> None:
        """Agents of the pool's nodes come up and reconcile; the loop cycles."""
        for _ in range(n):
            for node in self.kube.pool_nodes("a100"):
                self.agent(node)
            self.sync()
            self.loop.cycle()
            for node, agent in list(self.agents.items()):
                if node in self.kube.nodes:
                    agent.heartbeat()
                    agent.reconcile()

    def submit(self, name: str, *, cpu: float = 8, gpu: int = 1, replicas: int = 1, **extra):
        spec = {
            "name": name,
            "roles": {
                "trainer": {
                    "replicas": replicas,
                    "command": "python train.py",
                    "resources": {"cpu": cpu, "memory": "64Gi", "gpu": gpu},
                }
            },
            **extra,
        }
        self.store.create_job(parse_job_spec(spec), user="ann")

    def task_pods(self) -> list[str]:
        return [n for n in self.kube.running() if n.startswith("task-")]


@pytest.fixture()
def aks(redis_url, tmp_path):
    cluster = Aks(redis_url, tmp_path)
    yield cluster
    cluster.close()


def test_a_waiting_jobs_placeholder_never_takes_the_gpu_a_task_was_bound_to(aks):
    """The issue's sequence: j1 and j2 wait with placeholders; the autoscaler adds one node;
    ph-j1 lands; the agent registers; the loop frees the node and binds j1 there; kube-
    scheduler retries ph-j2 at once on the delete. ph-j2 must not land on the node pasture
    now schedules, so the kubelet admits j1's pod (on main it answered
    UnexpectedAdmissionError and j1 failed)."""
    aks.submit("j1")
    aks.submit("j2")
    aks.step(2)
    assert sorted(n for (_, n) in aks.kube.pods if n.startswith("ph-")) == [
        "ph-j1-trainer-0",
        "ph-j2-trainer-0",
    ]
    aks.kube.pools["a100"]["max_count"] = 1  # one node comes first
    (node,) = aks.kube.autoscale()
    assert aks.kube.pods[("pasture", "ph-j1-trainer-0")]["spec"]["nodeName"] == node
    aks.step(3)
    assert aks.kube.nodes[node]["metadata"]["labels"][REGISTERED_LABEL] == "true"
    assert aks.kube.rejections == []
    assert aks.store.get_job("j1").state == "running"
    (task,) = aks.store.tasks("j1")
    assert task.node == node and len(aks.task_pods()) == 1
    ph2 = aks.kube.pods[("pasture", "ph-j2-trainer-0")]
    assert not ph2["spec"].get("nodeName")  # still asking for a node of its own
    assert aks.store.get_job("j2").state == "queued"


def test_no_task_is_bound_where_another_pod_holds_the_gpu(aks):
    """A pod pasture does not own (a user's pod in another namespace, bound by
    kube-scheduler) holds the node's only GPU: the core must not bind a task there."""
    aks.add_pool_node("aks-a100-vmss-x")
    aks.step()
    aks.kube.create_namespaced_pod(
        "team-b",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "notebook"},
            "spec": {
                "nodeName": "aks-a100-vmss-x",
                "containers": [
                    {
                        "name": "nb",
                        "image": "jupyter",
                        "resources": {
                            "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                    }
                ],
            },
        },
    )
    aks.submit("train")
    aks.step(3)
    assert aks.kube.rejections == []
    assert aks.store.get_job("train").state == "queued"
    assert aks.store.tasks("train") == []


def test_capacity_is_allocatable_less_daemonsets_and_the_fence_sidecar(aks):
    """23,660m allocatable, 260m of DaemonSets: a 23.6-CPU job can never be admitted there
    (on main it was bound, answered OutOfcpu and failed); a 23.39-CPU job with its 10m
    fence sidecar fits and runs."""
    aks.add_pool_node("aks-a100-vmss-x")
    aks.submit("big", cpu=23.6)
    aks.step(3)
    assert aks.kube.rejections == []
    assert aks.store.get_job("big").state == "queued"
    aks.store.request_stop("big")
    aks.step(2)
    aks.submit("fits", cpu=23.39)
    aks.step(3)
    assert aks.kube.rejections == []
    assert aks.store.get_job("fits").state == "running"


def test_a_two_node_gang_asks_for_two_nodes_only(aks):
    """Item 4: a 2-node, 1-GPU-per-node gang: its placeholders stay until both nodes
    registered, so the autoscaler adds exactly two nodes and the gang runs on them."""
    aks.submit("gang", replicas=2)
    aks.step(2)
    aks.kube.pools["a100"]["max_count"] = 1
    (first,) = aks.kube.autoscale()  # one node comes before the other
    aks.step(3)
    assert aks.store.get_job("gang").state == "queued"
    assert aks.kube.pods[("pasture", "ph-gang-trainer-0")]["spec"]["nodeName"] == first
    aks.kube.pools["a100"]["max_count"] = 4
    for _ in range(3):
        aks.kube.autoscale()
        aks.step(2)
    assert aks.kube.added == [first, aks.kube.added[1]] and len(aks.kube.added) == 2
    assert aks.store.get_job("gang").state == "running"
    assert sorted(t.node for t in aks.store.tasks("gang")) == sorted(aks.kube.added)
    assert aks.kube.rejections == []


@pytest.mark.parametrize(
    ("how", "cause", "kind"),
    [
        ("drain", "evicted", "evicted"),
        ("shutdown", "node_shutdown", "node_shutdown"),
        ("admission", "admission_rejected", "out_of_resources"),
    ],
)
def test_platform_endings_requeue_free_with_a_named_cause(redis_url, tmp_path, how, cause, kind):
    """Item 5: a drain's DisruptionTarget, a graceful node shutdown (143) and a kubelet
    admission rejection (OutOfcpu) requeue the job without charging its one attempt (on
    main: failed)."""
    aks = Aks(redis_url, tmp_path, hold_s=0)
    try:
        aks.add_pool_node("aks-a100-vmss-x")
        aks.step()
        aks.submit("train")
        if how == "admission":
            aks.sync()
            aks.loop.cycle()  # bound; before its agent makes the pod, a foreign pod lands
            aks.kube.create_namespaced_pod(
                "team-b",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "hog"},
                    "spec": {
                        "nodeName": "aks-a100-vmss-x",
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "20"}}}
                        ],
                    },
                },
            )
            aks.step(3)
        else:
            aks.step(2)
            assert aks.store.get_job("train").state == "running"
            if how == "drain":
                aks.kube.end_pods("aks-a100-vmss-x", "EvictionByEvictionAPI", reason=None)
            else:
                aks.kube.shutdown_node("aks-a100-vmss-x")
            aks.step(2)
        job = aks.store.get_job("train")
        (ended,) = job.attempts
        assert ended["charged"] is False, ended
        assert job.state in ("queued", "scheduled", "running"), job.reason
        events = " ".join(e["reason"] for e in aks.store.events("train"))
        assert cause in events and "not charged" in events, events
        assert kind in events, events
    finally:
        aks.close()


@pytest.mark.parametrize("how", ["never_admitted", "sandbox_never_created"])
def test_a_pod_never_admitted_is_requeued_free_after_the_pending_timeout(aks, how):
    """Item 6: a task pod bound to a node whose kubelet never admits it (NotReady), or
    admitted but stuck in ``ContainerCreating`` (``FailedCreatePodSandBox``, a failed Azure
    Files mount), is not running for longer than the limit: its task ends, whatever the
    reason, as the infrastructure's fault (cause ``not_started``): the job is requeued
    without using an attempt (on main the task failed with exit 125, charged)."""
    aks.add_pool_node("aks-a100-vmss-x")
    aks.step()
    aks.submit("train")
    aks.sync()
    aks.loop.cycle()
    if how == "never_admitted":
        with aks.kube.cond:  # the kubelet stops answering: the Node goes NotReady
            (c,) = aks.kube.nodes["aks-a100-vmss-x"]["status"]["conditions"]
            c.update(status="Unknown", reason="NodeStatusUnknown")
    aks.agents["aks-a100-vmss-x"].reconcile()  # creates the pod
    (pod,) = [n for (_, n) in aks.kube.pods if n.startswith("task-")]
    if how == "sandbox_never_created":  # admitted; the kubelet cannot create its sandbox
        with aks.kube.cond:
            wire = aks.kube.pods[("pasture", pod)]
            waiting = {"waiting": {"reason": "ContainerCreating"}}
            wire["status"] = {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "ready": False,
                        "restartCount": 0,
                        "image": "",
                        "imageID": "",
                        "state": waiting,
                    }
                    for c in wire["spec"]["containers"]
                ],
            }
    aks.agents["aks-a100-vmss-x"].reconcile()  # first sees it not running
    assert aks.kube.pods[("pasture", pod)]["status"]["phase"] == "Pending"
    aks.exec_clock.t += 599
    aks.agents["aks-a100-vmss-x"].reconcile()
    assert aks.store.tasks("train")[0].state in ("scheduled", "running")
    aks.exec_clock.t += 2
    aks.agents["aks-a100-vmss-x"].reconcile()
    (task,) = aks.store.tasks("train")
    assert task.state == "lost" and task.exit_code == 125, task
    assert task.cause == "not_started" and "ended by the platform" in task.message, task
    assert task.diagnosis["kind"] == "not_running", task.diagnosis
    if how == "sandbox_never_created":
        assert "ContainerCreating" in task.message, task.message
    aks.loop.cycle()
    job = aks.store.get_job("train")
    assert job.state != "failed", job.reason
    (ended,) = job.attempts
    assert ended["charged"] is False and ended["cause"] == "not_started", ended


def test_cordons_noexecute_and_notready_on_the_node_object_are_honoured(aks):
    """Item 2 (11): an AKS upgrade cordons the Node (spec.unschedulable); the core binds
    nothing there until it is uncordoned; likewise a NoExecute taint and NotReady."""
    aks.add_pool_node("aks-a100-vmss-x")
    aks.step()
    aks.kube.cordon("aks-a100-vmss-x")
    aks.submit("train")
    aks.step(3)
    assert aks.store.get_job("train").state == "queued"
    aks.kube.cordon("aks-a100-vmss-x", on=False)
    aks.kube.taint("aks-a100-vmss-x", "node.kubernetes.io/unreachable", "NoExecute")
    aks.step(2)
    assert aks.store.get_job("train").state == "queued"
    with aks.kube.cond:
        aks.kube.nodes["aks-a100-vmss-x"]["spec"]["taints"] = [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ]
        aks.kube._node_changed("aks-a100-vmss-x")
    aks.step(2)
    assert aks.store.get_job("train").state == "running"


def test_nodes_gone_for_good_are_forgotten_and_the_pool_grows_again(redis_url, tmp_path):
    """Item 2: a pool of max 1; its node is Spot-evicted (drained, then deleted). The task
    is requeued free, the node's record forgotten with an event, and the pool grows again
    for the requeued job (on main the lost record counted toward maxCount for good)."""
    aks = Aks(redis_url, tmp_path, max_count=1)
    try:
        aks.submit("train")
        aks.step(2)
        (first,) = aks.kube.autoscale()
        aks.step(3)
        assert aks.store.get_job("train").state == "running"
        aks.kube.evict_node(first)
        for _ in range(30):  # silence is observed in steps under half the timeout
            aks.clock.t += 10
            aks.step()
        assert aks.store.get_node(first) is None
        assert [e["node"] for e in aks.store.forgotten_nodes()] == [first]
        job = aks.store.get_job("train")
        assert [a["charged"] for a in job.attempts] == [False]
        assert "autoscaler" in (job.pending_reason or {}).get("message", ""), job
        (second,) = aks.kube.autoscale()
        aks.step(3)
        assert second != first
        assert aks.store.get_job("train").state == "running"
    finally:
        aks.close()


def test_pool_sizes_are_aks_allocatable_less_daemonsets_and_the_sidecar():
    """Item 3: a pool given by its VM size offers what AKS leaves after its reservations
    (Microsoft's formula: kube-reserved CPU by cores, min(20 MiB * max pods + 50 MiB, 25 %)
    of memory, 100 MiB eviction threshold), and a task fits a new node only with the
    DaemonSets' and its fence sidecar's share taken off."""
    assert aks_allocatable(24, 220 * GI)[0] == 23_660  # the NC24ads_A100_v4
    assert aks_allocatable(8, 8 * GI, max_pods=30) == (7_820, 8 * GI - 650 * MI - 100 * MI)
    assert aks_allocatable(4, 4 * GI, max_pods=70)[1] == 4 * GI - GI - 100 * MI  # 25 % cap
    assert aks_allocatable(96, 880 * GI)[0] == 96_000 - 1_060
    with pytest.raises(ValueError, match="1 core"):
        aks_allocatable(0, GI)
    env = {
        "PASTURE_K8S_POOLS": '[{"name": "a100", "vm_cpu": 24, "vm_memory": 236223201280,'
        ' "gpu": 1, "max_count": 4}]'
    }
    (pool,) = pools_from_env(env)
    assert pool.cpu_m == 23_660

    class R:
        def __init__(self, cpu_m):
            self.cpu_m, self.memory, self.gpu = cpu_m, 64 * GI, 1

    # between real allocatable and the VM size: no node of the pool can ever hold it
    assert not pool.fits(R(23_800), None, {})
    # 23,660 - 160 (pasture's DaemonSets) - 10 (fence sidecar) = 23,490
    assert pool.fits(R(23_490), None, {}) and not pool.fits(R(23_491), None, {})


def test_twenty_gpu_jobs_through_two_scale_cycles_and_two_spot_evictions(redis_url, tmp_path):
    """The issue's scenario: 20 one-GPU jobs on a pool of at most 4 nodes that scales
    0 -> N -> 0 twice, with a Spot eviction in each round. Every job succeeds without a
    charged attempt (infrastructure requeues allowed), the kubelet never refuses a pod
    (no node over-provisioned), the pool never exceeds its maxCount, and it grows again
    after the second scale-down."""
    aks = Aks(redis_url, tmp_path, max_count=4)
    aks.kube.unneeded_passes = 6  # an idle node goes after 30 s (6 steps of 5 s)
    names = [f"job{i:02d}" for i in range(20)]
    seen: dict[str, int] = {}  # task pod -> step it was first seen running
    step = 0
    try:
        for rnd, batch in enumerate((names[:10], names[10:])):
            for name in batch:
                aks.submit(name)
            evicted = False
            for _ in range(200):
                step += 1
                aks.kube.autoscale()
                assert len(aks.kube.pool_nodes("a100")) <= 4
                aks.clock.t += 5
                aks.step()
                running = aks.task_pods()
                for pod in running:
                    seen.setdefault(pod, step)
                if not evicted and len(running) >= 2:  # a Spot eviction mid-round
                    (victim,) = [
                        p["spec"]["nodeName"]
                        for (_, n), p in aks.kube.pods.items()
                        if n == running[0]
                    ]
                    aks.kube.evict_node(victim)
                    evicted = True
                    continue
                for pod in running:  # each task runs 3 steps (15 s)
                    if step - seen[pod] >= 3:
                        aks.kube.finish(pod, 0)
                if all(aks.store.get_job(n).state == "succeeded" for n in batch):
                    break
            states = {n: aks.store.get_job(n).state for n in batch}
            assert set(states.values()) == {"succeeded"}, (rnd, states)
            for _ in range(10):  # everything ends: the pool goes back to 0
                aks.kube.autoscale()
                aks.clock.t += 5
                aks.step()
                if not aks.kube.pool_nodes("a100"):
                    break
            assert aks.kube.pool_nodes("a100") == [], rnd
        assert aks.kube.rejections == []
        requeued, used = {}, set()
        for name in names:
            job = aks.store.get_job(name)
            assert job.state == "succeeded" and all(not a["charged"] for a in job.attempts), (
                name,
                job.attempts,
            )
            requeued[name] = [a["cause"] for a in job.attempts if a["state"] == "queued"]
            used |= {n for a in job.attempts for n in a["nodes"]}
        # the two evicted tasks were requeued (node lost), every other job ran once
        assert sorted(c for cs in requeued.values() for c in cs) == ["node_lost", "node_lost"]
        # no node over-provisioned: every node the autoscaler added ran a task (4 per
        # round, one replacing each evicted node, one for each requeued job once the
        # pool had scaled down meanwhile)
        assert set(aks.kube.added) <= used, sorted(set(aks.kube.added) - used)
        assert len(aks.kube.added) <= 2 * (4 + 2), aks.kube.added
        # the pool grows again: its lost and scaled-down nodes count toward nothing
        aks.submit("after")
        aks.step(2)
        assert aks.kube.autoscale()
        aks.step(3)
        assert aks.store.get_job("after").state == "running"
    finally:
        aks.close()


def test_the_autoscalers_failures_reach_the_jobs_reason(aks):
    """Item 11: a scale-up that fails (a quota, no Spot capacity) leaves the cluster
    autoscaler's NotTriggerScaleUp event on the placeholder; the job's pending reason says
    it (on main it only said "waiting for the autoscaler")."""
    aks.kube.fail_scale_up("a100", "QuotaExceeded: standardNCADSA100v4Family quota 0 of 24")
    aks.submit("train")
    aks.step(2)
    assert aks.kube.autoscale() == []
    aks.step(2)
    reason = aks.store.get_job("train").pending_reason
    assert "waiting for the autoscaler to add a node to pool a100" in reason["message"]
    assert "in backoff after failed scale-up (QuotaExceeded" in reason["message"], reason
    aks.kube.fail_scale_up("a100", None)
    assert aks.kube.autoscale()
    aks.step(3)
    assert aks.store.get_job("train").state == "running"
