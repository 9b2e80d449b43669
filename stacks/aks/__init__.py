"""AKS (MARO k8s mode): the scheduler, Redis and the agents run in Kubernetes.

    ResourceGroup
      ├─ Registry (ACR, names.registry_name) <── RoleAssignment AcrPull ── kubelet identity
      ├─ docker-build Image: Containerfile -> <acr>/pasture@sha256:... (image.py; skipped
      │     when pastureImage names an image)
      ├─ ManagedCluster (system pool) ── AgentPool per GPU pool (taints, Spot, autoscaler)
      ├─ StorageAccount (names.storage_account_name) ─ FileShare (the cluster share)
      └─ kubernetes.Provider (kubeconfig, secret) ──> Namespace, then one builder per family:
            redis.py          Secret (Redis password), Service + StatefulSet
            sealkey.py        Secret (job secrets' Fernet key, derived from the password)
            share.py          Secret (account key), PersistentVolume, PVC "pasture-share"
            scheduler.py      ConfigMap (settings.py: contract 2 from the settings models),
                              Deployment (api + loop), Service (LoadBalancer)
            agents.py         ServiceAccount + Role + ClusterRole (nodes get),
                              DaemonSet pasture-agent-<pool> per GPU pool
            device_plugin.py  DaemonSet nvidia-device-plugin-<pool> per GPU pool

Tolerations everywhere come from one parser (scheduler.k8s.taints): a pool's taints plus
the AKS Spot taint for Spot pools, on its agent and device plugin DaemonSets and (through
``PASTURE_K8S_TOLERATIONS``) on the task pods its agents bind.

Scaling: edit a GPU pool's ``min_count``/``max_count`` (and ``count``) and ``pulumi up``;
the cluster autoscaler adds nodes when task pods need them, and each new node's agent
registers it with the scheduler (capacity from the node object). Nodes are not known when
the stack runs, so the exported ClusterOutputs has no nodes: Ansible does not converge an
aks cluster.
"""

from stacks.aks.cluster import ACR_PULL_ROLE, AksCluster, AksClusterArgs, deploy_workloads
from stacks.aks.common import POOL_LABEL, SHARE_CLAIM, SHARE_MOUNT, pool_labels

__all__ = [
    "ACR_PULL_ROLE",
    "POOL_LABEL",
    "SHARE_CLAIM",
    "SHARE_MOUNT",
    "AksCluster",
    "AksClusterArgs",
    "deploy_workloads",
    "pool_labels",
]
