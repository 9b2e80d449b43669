"""The cluster share in Kubernetes: the Azure Files share as a static PersistentVolume
(file.csi.azure.com, the storage account key in a Secret) and the ReadWriteMany claim
``pasture-share`` that the scheduler, the agents and every task pod mount."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from stacks.aks.common import SHARE_CLAIM, Workloads
from stacks.config import StackConfig

SHARE_SECRET = "pasture-share"


def cluster_share(
    w: Workloads,
    cfg: StackConfig,
    account_name: pulumi.Input[str],
    account_key: pulumi.Input[str],
    share: pulumi.Resource,
) -> k8s.core.v1.PersistentVolumeClaim:
    """Secret (account name and key), PersistentVolume and PersistentVolumeClaim of the
    Azure Files ``share`` (``shareQuotaGb`` GiB)."""
    k8s.core.v1.Secret(
        f"{w.prefix}-share-secret",
        metadata=w.meta(SHARE_SECRET),
        string_data={
            "azurestorageaccountname": account_name,
            "azurestorageaccountkey": account_key,
        },
        opts=w.opts,
    )
    size = f"{cfg.share_quota_gb}Gi"
    pv = k8s.core.v1.PersistentVolume(
        f"{w.prefix}-share-pv",
        metadata={"name": f"{w.namespace}-share"},
        spec={
            "capacity": {"storage": size},
            "access_modes": ["ReadWriteMany"],
            "persistent_volume_reclaim_policy": "Retain",
            "storage_class_name": "",
            "mount_options": ["dir_mode=0777", "file_mode=0666", "mfsymlinks", "nobrl"],
            "csi": {
                "driver": "file.csi.azure.com",
                "volume_handle": f"{w.namespace}-{cfg.share_name}",
                "volume_attributes": {"shareName": cfg.share_name},
                "node_stage_secret_ref": {"name": SHARE_SECRET, "namespace": w.namespace},
            },
        },
        opts=w.with_deps(share),
    )
    return k8s.core.v1.PersistentVolumeClaim(
        f"{w.prefix}-share-pvc",
        metadata=w.meta(SHARE_CLAIM),
        spec={
            "access_modes": ["ReadWriteMany"],
            "storage_class_name": "",
            "volume_name": pv.metadata["name"],
            "resources": {"requests": {"storage": size}},
        },
        opts=w.opts,
    )
