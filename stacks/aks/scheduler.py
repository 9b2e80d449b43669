"""The scheduler in Kubernetes: the settings ConfigMap, one pod with the API and the loop
(Deployment, strategy Recreate: never two loops at once) and the API Service (a load
balancer open to ``allowedCidrs``, else internal to the vnet).

The loop gets the GPU pools (``PASTURE_K8S_POOLS``: what one node offers, ``max_count``,
taints, labels) for its autoscaler placeholders (scheduler/k8s/autoscale.py), whose
PriorityClass :func:`placeholder_priority_class` makes. Task pods have no
PodDisruptionBudget: ``maxUnavailable: 0`` made AKS refuse upgrades (UnsatisfiablePDB);
an upgrade drains nodes and pasture requeues the evicted tasks (docs/platforms.md). Both
containers have requests and liveness probes (the API: any HTTP answer on ``/healthz``,
:func:`api_liveness_command`, so a Redis outage does not restart it; the loop: its cycle
counter moved within :data:`LOOP_STALL_S`, scheduler/agent/k8s_probe.py).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from scheduler.k8s.autoscale import (
    NAMESPACE_ENV,
    PLACEHOLDER_PRIORITY,
    POOLS_ENV,
    PRIORITY_CLASS,
)
from scheduler.k8s.taints import pool_taints
from stacks.aks.common import (
    CONFIG_DIR,
    CONFIG_MAP,
    SYSTEM_NODES,
    Workloads,
    app_labels,
    pasture_mounts,
    pasture_volumes,
    pool_labels,
)
from stacks.aks.nodecred import SCHEDULER_SA
from stacks.aks.redis import REDIS_NAME, SECRETS_DIR
from stacks.aks.sealkey import key_mount, key_volume
from stacks.aks.settings import agent_settings, scheduler_settings, to_yaml
from stacks.config import StackConfig

SCHEDULER_NAME = "pasture-scheduler"
API_SERVICE = "pasture-api"
AGENT_CONFIG = f"{CONFIG_DIR}/agent.yaml"
API_RESOURCES = {"requests": {"cpu": "200m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
LOOP_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "4Gi"}}
LOOP_STALL_S = 300
"""Liveness limit of the loop: seconds its cycle counter may stay still while the store
answers (it cycles at least every loop.interval_s)."""
MIB = 1024 * 1024

_API_ALIVE = """import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{int(sys.argv[1])}/healthz", timeout=5)
except urllib.error.HTTPError:
    pass  # 503 while Redis is away: the API itself answers, it is alive
"""


def api_liveness_command(port: int) -> list[str]:
    """Exec liveness probe of the API container: succeeds when the API answers
    ``/healthz`` with any HTTP status (200, or 503 while Redis is unreachable), fails when
    nothing answers within 5 s (connection refused, hung server). A restart cures neither a
    Redis outage nor a slow failover, and CrashLoopBackOff would delay the API's return."""
    return ["python3", "-c", _API_ALIVE, str(port)]


def autoscaled_pools(cfg: StackConfig) -> str:
    """``PASTURE_K8S_POOLS`` of the loop: the GPU pools as JSON (one node's VM size as
    ``vm_cpu`` cores and ``vm_memory`` bytes from the pool's ``cpu`` and ``memory_mib``,
    which the loop turns into allocatable by AKS's node reservations,
    :func:`scheduler.k8s.autoscale.aks_allocatable`; ``gpu_count``, ``gpu_model``;
    ``max_count``; the taints task pods tolerate, Spot included; node labels)."""
    return json.dumps(
        [
            {
                "name": p.name,
                "vm_cpu": p.cpu,
                "vm_memory": p.memory_mib * MIB,
                "gpu": p.gpu_count,
                "gpu_model": p.gpu_model,
                "max_count": p.max_count,
                "taints": list(pool_taints(p.taints, spot=p.spot)),
                "labels": pool_labels(p),
            }
            for p in cfg.gpu_pools
        ]
    )


def placeholder_priority_class(w: Workloads) -> k8s.scheduling.v1.PriorityClass:
    """PriorityClass of the autoscaler's placeholder pods: below every real pod (negative),
    never preempting anything."""
    return k8s.scheduling.v1.PriorityClass(
        f"{w.prefix}-placeholder-priority",
        metadata={"name": PRIORITY_CLASS},
        value=PLACEHOLDER_PRIORITY,
        preemption_policy="Never",
        global_default=False,
        description="pasture: placeholder pods that make the cluster autoscaler add nodes",
        opts=w.opts,
    )


def settings_config_map(w: Workloads, cfg: StackConfig) -> k8s.core.v1.ConfigMap:
    """ConfigMap ``pasture-config`` with ``scheduler.yaml`` and the ``agent.yaml``
    template (contract 2, see :mod:`stacks.aks.settings`)."""
    return k8s.core.v1.ConfigMap(
        f"{w.prefix}-config",
        metadata=w.meta(CONFIG_MAP),
        data={
            "scheduler.yaml": to_yaml(scheduler_settings(cfg)),
            "agent.yaml": to_yaml(agent_settings(cfg)),
        },
        opts=w.opts,
    )


def scheduler_deployment(
    w: Workloads, cfg: StackConfig, image: pulumi.Input[str]
) -> k8s.apps.v1.Deployment:
    """Deployment of the API and loop containers of ``image`` on the system nodes."""
    labels = app_labels(SCHEDULER_NAME)
    config = f"{CONFIG_DIR}/scheduler.yaml"
    mounts = pasture_mounts(SECRETS_DIR)
    api = {
        "name": "api",
        "image": image,
        "command": ["pasture", "serve", "api", "--config", config],
        "ports": [{"container_port": cfg.api_port, "name": "api"}],
        "volume_mounts": [*mounts, key_mount()],  # the API seals job secrets
        "resources": API_RESOURCES,
        "readiness_probe": {"tcp_socket": {"port": cfg.api_port}, "period_seconds": 5},
        "liveness_probe": {
            "exec": {"command": api_liveness_command(cfg.api_port)},
            "initial_delay_seconds": 30,
            "period_seconds": 20,
            "timeout_seconds": 10,
            "failure_threshold": 3,
        },
    }
    probe = ["python3", "-m", "scheduler.agent.k8s_probe", "cycles", config]
    loop = {
        "name": "loop",
        "image": image,
        "command": ["pasture", "serve", "loop", "--config", config],
        "env": [
            {"name": POOLS_ENV, "value": autoscaled_pools(cfg)},
            {"name": NAMESPACE_ENV, "value": w.namespace},
        ],
        "volume_mounts": mounts,
        "resources": LOOP_RESOURCES,
        "liveness_probe": {
            "exec": {"command": [*probe, "/tmp/pasture-cycles.json", str(LOOP_STALL_S)]},
            "initial_delay_seconds": 60,
            "period_seconds": 30,
            "timeout_seconds": 20,
            "failure_threshold": 3,
        },
    }
    return k8s.apps.v1.Deployment(
        f"{w.prefix}-scheduler",
        metadata=w.meta(SCHEDULER_NAME),
        spec={
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"match_labels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "node_selector": SYSTEM_NODES,
                    "service_account_name": SCHEDULER_SA,  # reviews agents' tokens
                    "containers": [api, loop],
                    "volumes": [*pasture_volumes(REDIS_NAME), key_volume()],
                },
            },
        },
        opts=w.opts,
    )


def api_service(w: Workloads, cfg: StackConfig) -> k8s.core.v1.Service:
    """LoadBalancer Service of the API: public with ``loadBalancerSourceRanges`` =
    ``allowedCidrs`` when set, else an internal Azure load balancer."""
    spec: dict[str, Any] = {
        "type": "LoadBalancer",
        "selector": app_labels(SCHEDULER_NAME),
        "ports": [{"name": "api", "port": cfg.api_port, "target_port": cfg.api_port}],
    }
    annotations = {}
    if cfg.allowed_cidrs:
        spec["load_balancer_source_ranges"] = list(cfg.allowed_cidrs)
    else:  # reachable only inside the vnet
        annotations["service.beta.kubernetes.io/azure-load-balancer-internal"] = "true"
    return k8s.core.v1.Service(
        f"{w.prefix}-api",
        metadata=w.meta(API_SERVICE, annotations=annotations),
        spec=spec,
        opts=w.opts,
    )
