"""The scheduler in Kubernetes: the settings ConfigMap, one pod with the API and the loop
(Deployment, strategy Recreate: never two loops at once) and the API Service (a load
balancer open to ``allowedCidrs``, else internal to the vnet)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from stacks.aks.common import (
    CONFIG_DIR,
    CONFIG_MAP,
    SYSTEM_NODES,
    Workloads,
    app_labels,
    pasture_mounts,
    pasture_volumes,
)
from stacks.aks.nodecred import SCHEDULER_SA
from stacks.aks.redis import REDIS_NAME, SECRETS_DIR
from stacks.aks.sealkey import key_mount, key_volume
from stacks.aks.settings import agent_settings, scheduler_settings, to_yaml
from stacks.config import StackConfig

SCHEDULER_NAME = "pasture-scheduler"
API_SERVICE = "pasture-api"
AGENT_CONFIG = f"{CONFIG_DIR}/agent.yaml"


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
        "readiness_probe": {"tcp_socket": {"port": cfg.api_port}, "period_seconds": 5},
    }
    loop = {
        "name": "loop",
        "image": image,
        "command": ["pasture", "serve", "loop", "--config", config],
        "volume_mounts": mounts,
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
