"""The NVIDIA device plugin (advertises ``nvidia.com/gpu`` on GPU nodes): one DaemonSet
per GPU pool (``nvidia-device-plugin-<pool>``) tolerating that pool's taints, the AKS
Spot taint for a Spot pool, and ``nvidia.com/gpu``. No GPU pool, no DaemonSet."""

from __future__ import annotations

import pulumi_kubernetes as k8s

from scheduler.k8s.taints import pool_taints, tolerations
from stacks.aks.common import Workloads, app_labels, pool_affinity
from stacks.config import GpuPool, StackConfig

PLUGIN_NAME = "nvidia-device-plugin"
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
GPU_TAINT = "nvidia.com/gpu:NoSchedule"


def device_plugin_daemonset(w: Workloads, cfg: StackConfig, pool: GpuPool) -> k8s.apps.v1.DaemonSet:
    """DaemonSet of ``devicePluginImage`` on the nodes of ``pool``."""
    labels = {**app_labels(PLUGIN_NAME), "pasture/pool": pool.name}
    taints = (*pool_taints(pool.taints, spot=pool.spot), GPU_TAINT)
    container = {
        "name": PLUGIN_NAME,
        "image": cfg.device_plugin_image,
        "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
        "security_context": {
            "allow_privilege_escalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volume_mounts": [{"name": "device-plugin", "mount_path": PLUGIN_DIR}],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        # registered with the kubelet while its socket is there (re-created when the
        # kubelet restarts and wipes the directory)
        "liveness_probe": {
            "exec": {"command": ["test", "-S", f"{PLUGIN_DIR}/nvidia-gpu.sock"]},
            "initial_delay_seconds": 60,
            "period_seconds": 30,
            "failure_threshold": 3,
        },
    }
    return k8s.apps.v1.DaemonSet(
        f"{w.prefix}-nvidia-device-plugin-{pool.name}",
        metadata=w.meta(f"{PLUGIN_NAME}-{pool.name}"),
        spec={
            "selector": {"match_labels": labels},
            "update_strategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "affinity": pool_affinity(pool),
                    "tolerations": tolerations(taints),
                    "containers": [container],
                    "volumes": [{"name": "device-plugin", "host_path": {"path": PLUGIN_DIR}}],
                },
            },
        },
        opts=w.opts,
    )
