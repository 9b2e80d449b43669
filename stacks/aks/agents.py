"""The agents: one DaemonSet per GPU pool (``pasture-agent-<pool>``), each on its pool's
nodes only, tolerating exactly that pool's taints (with the AKS Spot taint for a Spot
pool), and giving the same tolerations to the task pods it binds (env
``PASTURE_K8S_TOLERATIONS`` of the kubernetes executor).

    ServiceAccount pasture-agent ── Role: pods create/get/list/watch/delete, pods/log get,
                                       secrets create/delete (tasks' job secrets)
                                 (no Redis secret: each agent exchanges its pod's token
                                  for its node's own Redis user, stacks/aks/nodecred.py)
                                 └─ ClusterRole <namespace>-agent-nodes: nodes get
                                    (capacity from the node object, scheduler.k8s.capacity)
    DaemonSet pasture-agent-<pool> (hostNetwork, node affinity pasture/pool In [<pool>],
                                    work dir /var/lib/pasture a hostPath: the lease file
                                    the task pods' fence sidecars read, and the state an
                                    agent restarted in a new pod adopts its tasks from)

Upgrades never fence running tasks: the DaemonSet rolls with ``maxSurge: 1,
maxUnavailable: 0``, its pods in PriorityClass ``pasture-agent`` (above tasks, so the surge
pod starts on a full node), so the new agent pod pulls its image and starts while the old one
still renews the lease; the new one then waits on a node-local ``flock`` of
``/var/lib/pasture/agent.lock`` (never two agents of one node at once), which the old
agent releases when SIGTERM ends it (it exits at once and leaves its tasks running,
scheduler/agent/__init__.py); the new agent adopts them within the lease. Requests
(:data:`AGENT_RESOURCES`) keep the agent out of the BestEffort class the kubelet evicts
first; a liveness probe restarts an agent whose lease file went stale
(:mod:`scheduler.agent.k8s_probe`). Each agent labels its node ``pasture/pool=<pool>``
in the store (the loop's autoscaler counts a pool's nodes by it).

No GPU pool, no agent DaemonSet (an empty ``In`` list is refused by the API server).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from scheduler.agent.gpu_dcgm import DCGM_URL_ENV
from scheduler.k8s.capacity import NODE_ENV
from scheduler.k8s.taints import pool_taints, tolerations
from stacks.aks.common import (
    SHARE_CLAIM,
    Workloads,
    app_labels,
    pasture_mounts,
    pasture_volumes,
    pool_affinity,
)
from stacks.aks.nodecred import (
    AGENT_CLUSTER_RULES,
    FETCH_CREDENTIAL,
    URL_ENV,
    agent_mounts,
    agent_volumes,
    node_reader,
)
from stacks.aks.redis import SECRETS_DIR
from stacks.aks.scheduler import AGENT_CONFIG
from stacks.aks.sealkey import key_mount, key_volume
from stacks.aks.settings import (
    NODE_ADDRESS_PLACEHOLDER,
    NODE_NAME_PLACEHOLDER,
    NODE_POOL_PLACEHOLDER,
    WORK_DIR,
)
from stacks.config import GpuPool

AGENT_NAME = "pasture-agent"
AGENT_DIR = str(WORK_DIR)  # the agent's work_dir, on the node
ADDRESS_ENV = "PASTURE_K8S_NODE_ADDRESS"
POOL_ENV = "PASTURE_K8S_POOL"
LOCK_FILE = f"{AGENT_DIR}/agent.lock"
# agent.yaml from the ConfigMap template, with this node's name, address and pool.
WRITE_CONFIG = (
    f'mkdir -p /etc/pasture && sed -e "s/{NODE_NAME_PLACEHOLDER}/${NODE_ENV}/" '
    f'-e "s/{NODE_ADDRESS_PLACEHOLDER}/${ADDRESS_ENV}/" '
    f'-e "s/{NODE_POOL_PLACEHOLDER}/${POOL_ENV}/" {AGENT_CONFIG} '
    "> /etc/pasture/agent.yaml && exec pasture agent run --config /etc/pasture/agent.yaml"
)
# One agent per node: fd 9 holds the node-local lock across the final exec (an upgrade's
# surge pod waits here until the old agent exited).
HOLD_LOCK = f"exec 9>{LOCK_FILE} && flock 9"
# First the node's own Redis password (stacks/aks/nodecred.py), then the lock, agent.yaml.
START_AGENT = f"{FETCH_CREDENTIAL} && {HOLD_LOCK} && {WRITE_CONFIG}"
AGENT_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
"""The agent container's requests and limit (Burstable: evicted after BestEffort pods)."""
AGENT_PRIORITY_CLASS = "pasture-agent"
AGENT_PRIORITY = 1_000_000
"""Priority of agent pods: above task pods (0, no class) and placeholders (negative),
below Kubernetes' system-critical classes (2e9), so an upgrade's surge pod that finds its
node full still starts (the scheduler preempts a placeholder, else a task pod, which the
executor reports as a disruption and pasture requeues free)."""
LEASE_PROBE_S = 300
"""The agent's liveness limit: seconds its lease file may go without a renewal."""


def agent_rbac(w: Workloads) -> k8s.core.v1.ServiceAccount:
    """ServiceAccount of the agents with its Role (task pods and their Secrets, in the
    namespace only) and ClusterRole (read node objects)."""
    sa = k8s.core.v1.ServiceAccount(
        f"{w.prefix}-agent-sa", metadata=w.meta(AGENT_NAME), opts=w.opts
    )
    subjects = [{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": w.namespace}]
    k8s.rbac.v1.Role(
        f"{w.prefix}-agent-role",
        metadata=w.meta(AGENT_NAME),
        rules=[
            {
                "api_groups": [""],
                "resources": ["pods"],
                "verbs": ["create", "get", "list", "watch", "delete"],
            },
            {"api_groups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            # a task's job secrets, in a Secret its pod references (agent/k8s_secrets.py)
            {"api_groups": [""], "resources": ["secrets"], "verbs": ["create", "delete"]},
        ],
        opts=w.opts,
    )
    k8s.rbac.v1.RoleBinding(
        f"{w.prefix}-agent-binding",
        metadata=w.meta(AGENT_NAME),
        role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_NAME},
        subjects=subjects,
        opts=w.opts,
    )
    node_reader(w, "agent", subjects, AGENT_CLUSTER_RULES)
    return sa


def agent_priority_class(w: Workloads) -> k8s.scheduling.v1.PriorityClass:
    """PriorityClass :data:`AGENT_PRIORITY_CLASS` of the agent DaemonSets' pods."""
    return k8s.scheduling.v1.PriorityClass(
        f"{w.prefix}-agent-priority",
        metadata={"name": AGENT_PRIORITY_CLASS},
        value=AGENT_PRIORITY,
        preemption_policy="PreemptLowerPriority",
        global_default=False,
        description="pasture: node agents (an upgrade's surge pod must start on a full node)",
        opts=w.opts,
    )


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "value_from": {"field_ref": {"field_path": path}}}


def agent_daemonset(
    w: Workloads,
    pool: GpuPool,
    image: pulumi.Input[str],
    credentials_url: str,
    dcgm_port: int | None = None,
) -> k8s.apps.v1.DaemonSet:
    """DaemonSet ``pasture-agent-<pool>`` of ``image`` on the nodes of ``pool``; its
    agents fetch their node's Redis credential from ``credentials_url`` at start. With
    ``dcgm_port`` (monitoring on), each agent reads its GPUs' health from the node's
    dcgm-exporter at ``http://<node address>:<dcgm_port>/metrics`` (``PASTURE_DCGM_URL``:
    the agent pod has no NVML) and cordons its node on a GPU fault."""
    labels = {**app_labels(AGENT_NAME), "pasture/pool": pool.name}
    taints = pool_taints(pool.taints, spot=pool.spot)
    env = [
        _field(NODE_ENV, "spec.nodeName"),
        _field(ADDRESS_ENV, "status.hostIP"),
        {"name": "PASTURE_K8S_NAMESPACE", "value": w.namespace},
        {"name": "PASTURE_K8S_SHARE_CLAIM", "value": SHARE_CLAIM},
        {"name": "PASTURE_K8S_IMAGE", "value": image},
        {"name": "PASTURE_K8S_TOLERATIONS", "value": json.dumps(list(taints))},
        {"name": "PASTURE_K8S_AGENT_DIR", "value": AGENT_DIR},
        {"name": POOL_ENV, "value": pool.name},
        {"name": URL_ENV, "value": credentials_url},
    ]
    if dcgm_port is not None:  # $(VAR): Kubernetes expands an earlier variable of the list
        env.append({"name": DCGM_URL_ENV, "value": f"http://$({ADDRESS_ENV}):{dcgm_port}/metrics"})
    container = {
        "name": "agent",
        "image": image,
        "command": ["/bin/sh", "-c", START_AGENT],
        "env": env,
        "resources": AGENT_RESOURCES,
        "liveness_probe": {
            "exec": {
                "command": [
                    "python3",
                    "-m",
                    "scheduler.agent.k8s_probe",
                    "lease",
                    f"{AGENT_DIR}/lease",
                    str(LEASE_PROBE_S),
                ]
            },
            "initial_delay_seconds": 120,
            "period_seconds": 30,
            "timeout_seconds": 10,
            "failure_threshold": 3,
        },
        "volume_mounts": [
            *(m for m in pasture_mounts(SECRETS_DIR) if m["name"] != "redis-secret"),
            *agent_mounts(),
            {"name": "agent-dir", "mount_path": AGENT_DIR},
            key_mount(),  # opens job secrets (stacks/aks/sealkey.py)
        ],
    }
    agent_dir = {"name": "agent-dir", "host_path": {"path": AGENT_DIR, "type": "DirectoryOrCreate"}}
    return k8s.apps.v1.DaemonSet(
        f"{w.prefix}-agent-{pool.name}",
        metadata=w.meta(f"{AGENT_NAME}-{pool.name}"),
        spec={
            "selector": {"match_labels": labels},
            # surge first: the new agent is pulled and started before the old one stops
            "update_strategy": {
                "type": "RollingUpdate",
                "rolling_update": {"max_surge": 1, "max_unavailable": 0},
            },
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "service_account_name": AGENT_NAME,
                    "priority_class_name": AGENT_PRIORITY_CLASS,
                    "termination_grace_period_seconds": 30,
                    "host_network": True,
                    "dns_policy": "ClusterFirstWithHostNet",
                    "affinity": pool_affinity(pool),
                    "tolerations": tolerations(taints),
                    "containers": [container],
                    "volumes": [
                        *(v for v in pasture_volumes("") if v["name"] != "redis-secret"),
                        *agent_volumes(),
                        agent_dir,
                        key_volume(),
                    ],
                },
            },
        },
        opts=w.opts,
    )
