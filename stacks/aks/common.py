"""What the aks workload builders share: object names, labels, mounts, pool affinity.

Every builder takes a :class:`Workloads` (resource-name prefix, namespace, resource
options with the cluster's Kubernetes provider) and registers one family of objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from stacks.config import GpuPool

SHARE_CLAIM = "pasture-share"
SHARE_MOUNT = "/mnt/pasture"
CONFIG_MAP = "pasture-config"
CONFIG_DIR = "/etc/pasture/config"
POOL_LABEL = "pasture/pool"
# Read by the agent when the node has no nvidia.com/gpu.product label
# (scheduler.k8s.capacity.GPU_MODEL_LABEL).
GPU_MODEL_LABEL = "pasture/gpu-model"
SYSTEM_NODES = {"kubernetes.azure.com/mode": "system"}


@dataclass(frozen=True)
class Workloads:
    """Where the builders register: ``prefix`` of Pulumi resource names (the cluster
    name), Kubernetes ``namespace``, and ``opts`` (parent, provider, namespace dependency)."""

    prefix: str
    namespace: str
    opts: pulumi.ResourceOptions

    def meta(self, name: str, **extra: Any) -> dict[str, Any]:
        """``metadata`` of a namespaced object."""
        return {"name": name, "namespace": self.namespace, **extra}

    def with_deps(self, *deps: pulumi.Resource) -> pulumi.ResourceOptions:
        """``opts`` plus explicit dependencies."""
        return pulumi.ResourceOptions.merge(self.opts, pulumi.ResourceOptions(depends_on=deps))


def app_labels(name: str) -> dict[str, str]:
    """Selector labels of a workload."""
    return {"app.kubernetes.io/name": name}


def pool_labels(pool: GpuPool) -> dict[str, str]:
    """Node labels of a GPU pool: its own labels plus ``pool``, ``pasture/pool`` and, when
    the pool names a GPU model, ``pasture/gpu-model``."""
    labels = {**pool.labels, "pool": pool.name, POOL_LABEL: pool.name}
    if pool.gpu_model:
        labels[GPU_MODEL_LABEL] = pool.gpu_model
    return labels


def pool_affinity(pool: GpuPool) -> dict[str, Any]:
    """Pod affinity that requires a node of ``pool`` (its ``pasture/pool`` label)."""
    term = {"match_expressions": [{"key": POOL_LABEL, "operator": "In", "values": [pool.name]}]}
    return {
        "node_affinity": {
            "required_during_scheduling_ignored_during_execution": {"node_selector_terms": [term]}
        }
    }


def pasture_volumes(redis_secret: str) -> list[dict[str, Any]]:
    """Volumes of the pasture pods: settings ConfigMap, Redis secret, the share."""
    return [
        {"name": "config", "config_map": {"name": CONFIG_MAP}},
        {"name": "redis-secret", "secret": {"secret_name": redis_secret}},
        {"name": "share", "persistent_volume_claim": {"claim_name": SHARE_CLAIM}},
    ]


def pasture_mounts(secrets_dir: str) -> list[dict[str, Any]]:
    """Mounts matching :func:`pasture_volumes`."""
    return [
        {"name": "config", "mount_path": CONFIG_DIR, "read_only": True},
        {"name": "redis-secret", "mount_path": secrets_dir, "read_only": True},
        {"name": "share", "mount_path": SHARE_MOUNT},
    ]
