"""The :class:`AksCluster` component: Azure resources, then the workloads through the
cluster's Kubernetes provider (one builder per object family, see the package docstring)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_azure_native import (
    authorization,
    containerregistry,
    containerservice,
    resources,
    storage,
)

from stacks.aks import names
from stacks.aks.agents import agent_daemonset, agent_priority_class, agent_rbac
from stacks.aks.common import Workloads, pool_labels
from stacks.aks.device_plugin import device_plugin_daemonset
from stacks.aks.image import builds_image, pasture_image
from stacks.aks.monitoring import DCGM_PORT, monitoring
from stacks.aks.nodecred import credentials_url, scheduler_identity
from stacks.aks.redis import redis_password_secret, redis_server
from stacks.aks.scheduler import (
    API_SERVICE,
    api_service,
    placeholder_priority_class,
    scheduler_deployment,
    settings_config_map,
)
from stacks.aks.sealkey import secrets_key_secret
from stacks.aks.share import cluster_share
from stacks.config import GpuPool, StackConfig, StackSecrets
from stacks.contract import ClusterOutputs, HostOutput, cluster_outputs

# Built-in role "AcrPull" (same id in every Azure subscription).
ACR_PULL_ROLE = "7f951dda-4ed3-4680-a7ca-43fe172d538d"


@dataclass(frozen=True)
class AksClusterArgs:
    """Arguments of :class:`AksCluster`: validated config and secrets."""

    config: StackConfig
    secrets: StackSecrets


def _spot(pool: GpuPool) -> dict[str, Any]:
    if not pool.spot:
        return {}
    return {
        "scale_set_priority": "Spot",
        "scale_set_eviction_policy": "Delete",
        "spot_max_price": -1,
    }


class AksCluster(pulumi.ComponentResource):
    """AKS with GPU pools and the pasture workloads; ``outputs`` is ClusterOutputs,
    ``kubeconfig`` a secret output, ``image`` the image reference the workloads run."""

    outputs: pulumi.Output[dict[str, Any]]
    kubeconfig: pulumi.Output[str]
    image: pulumi.Output[str]

    def __init__(
        self, name: str, args: AksClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        cfg, secrets = args.config, args.secrets
        names.check_config(cfg)  # refused before anything is declared
        super().__init__("pasture:aks:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # what makes global names differ between deployments of the same stack
        client = authorization.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=self)
        )
        project, stack = pulumi.get_project(), pulumi.get_stack()
        scope = client.subscription_id.apply(lambda sub: f"{sub}/{project}/{stack}")

        rg = resources.ResourceGroup(
            f"{name}-rg",
            resource_group_name=cfg.resource_group_name or None,
            location=cfg.location,
            opts=child,
        )
        self.resource_group_name = rg.name
        registry = containerregistry.Registry(
            f"{name}-acr",
            registry_name=scope.apply(lambda sc: names.registry_name(cfg.cluster_name, sc)),
            resource_group_name=rg.name,
            location=rg.location,
            sku={"name": cfg.acr_sku},
            # The build pushes with the registry's admin credentials; nodes pull with the
            # kubelet identity (AcrPull) either way.
            admin_user_enabled=builds_image(cfg),
            opts=child,
        )
        cluster = self._managed_cluster(name, cfg, rg, scope, child)
        for pool in cfg.gpu_pools:
            self._gpu_pool(name, pool, rg, cluster)
        self._acr_pull(name, cluster, registry, child)
        account, share, account_key = self._share(name, cfg, scope, rg, child)
        self.image = pasture_image(name, cfg, rg.name, registry, child)

        creds = containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=rg.name, resource_name=cluster.name
        )
        self.kubeconfig = pulumi.Output.secret(
            creds.kubeconfigs[0].value.apply(lambda v: base64.b64decode(v).decode())
        )
        # Depends on the cluster only (through the kubeconfig), never on the GPU pools: one
        # pool's quota or Spot capacity error must not hold back every workload.
        provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self),
        )
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata={"name": cfg.namespace},
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        w = Workloads(
            prefix=name,
            namespace=cfg.namespace,
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[namespace]),
        )
        api = deploy_workloads(w, cfg, secrets, self.image, account.name, account_key, share)

        def build(lb_ip: str) -> ClusterOutputs:
            return ClusterOutputs(
                platform="aks",
                cluster_name=cfg.cluster_name,
                master=HostOutput(name="master", address=lb_ip, connection="local"),
                nodes=[],
                share_name=cfg.share_name,
                api_endpoint=f"http://{lb_ip}:{cfg.api_port}",
            )

        lb_ip = api.status.apply(lambda s: s.load_balancer.ingress[0].ip)
        self.outputs = cluster_outputs(build, lb_ip)
        self.register_outputs(
            {"cluster": self.outputs, "kubeconfig": self.kubeconfig, "image": self.image}
        )

    def _managed_cluster(
        self,
        name: str,
        cfg: StackConfig,
        rg: resources.ResourceGroup,
        scope: pulumi.Output[str],
        opts: pulumi.ResourceOptions,
    ) -> containerservice.ManagedCluster:
        system = cfg.system_pool
        extra: dict[str, Any] = {}
        if cfg.kubernetes_version:
            extra["kubernetes_version"] = cfg.kubernetes_version
        if cfg.allowed_cidrs:
            extra["api_server_access_profile"] = {"authorized_ip_ranges": list(cfg.allowed_cidrs)}
        return containerservice.ManagedCluster(
            f"{name}-aks",
            resource_group_name=rg.name,
            location=rg.location,
            dns_prefix=cfg.cluster_name,
            # explicit: AKS' default MC_<group>_<cluster>_<location> overflows its 80 chars
            node_resource_group=scope.apply(
                lambda sc: names.node_resource_group_name(cfg.cluster_name, sc, cfg.location)
            ),
            identity={"type": "SystemAssigned"},
            enable_rbac=True,
            agent_pool_profiles=[
                {
                    "name": "system",
                    "mode": "System",
                    "count": system.count,
                    "vm_size": system.vm_size,
                    "os_disk_size_gb": system.disk_gb,
                    "os_type": "Linux",
                    "type": "VirtualMachineScaleSets",
                }
            ],
            network_profile={"network_plugin": "azure", "network_plugin_mode": "overlay"},
            opts=opts,
            **extra,
        )

    def _gpu_pool(
        self,
        name: str,
        pool: GpuPool,
        rg: resources.ResourceGroup,
        cluster: containerservice.ManagedCluster,
    ) -> containerservice.AgentPool:
        return containerservice.AgentPool(
            f"{name}-{pool.name}",
            agent_pool_name=pool.name,
            resource_group_name=rg.name,
            resource_name_=cluster.name,
            mode="User",
            os_type="Linux",
            type="VirtualMachineScaleSets",
            vm_size=pool.vm_size,
            os_disk_size_gb=pool.disk_gb,
            count=pool.count,
            enable_auto_scaling=True,
            min_count=pool.min_count,
            max_count=pool.max_count,
            node_taints=list(pool.taints),  # AKS adds the Spot taint itself
            node_labels=pool_labels(pool),
            # AKS upgrades surge new nodes and drain the old ones within the timeout;
            # no PodDisruptionBudget blocks them (docs/platforms.md "Upgrades").
            upgrade_settings={
                "max_surge": pool.upgrade_max_surge,
                "drain_timeout_in_minutes": pool.upgrade_drain_timeout_min,
            },
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["count"]),
            **_spot(pool),
        )

    def _acr_pull(
        self,
        name: str,
        cluster: containerservice.ManagedCluster,
        registry: containerregistry.Registry,
        opts: pulumi.ResourceOptions,
    ) -> None:
        client = authorization.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=self)
        )
        authorization.RoleAssignment(
            f"{name}-acr-pull",
            principal_id=cluster.identity_profile.apply(lambda p: p["kubeletidentity"].object_id),
            principal_type="ServicePrincipal",
            role_definition_id=client.subscription_id.apply(
                lambda sub: (
                    f"/subscriptions/{sub}/providers/Microsoft.Authorization"
                    f"/roleDefinitions/{ACR_PULL_ROLE}"
                )
            ),
            scope=registry.id,
            opts=opts,
        )

    def _share(
        self,
        name: str,
        cfg: StackConfig,
        scope: pulumi.Output[str],
        rg: resources.ResourceGroup,
        opts: pulumi.ResourceOptions,
    ) -> tuple[storage.StorageAccount, storage.FileShare, pulumi.Output[str]]:
        account = storage.StorageAccount(
            f"{name}-share-account",
            account_name=scope.apply(lambda sc: names.storage_account_name(cfg.cluster_name, sc)),
            resource_group_name=rg.name,
            location=rg.location,
            kind="StorageV2",
            sku={"name": "Standard_LRS"},
            allow_blob_public_access=False,
            enable_https_traffic_only=True,
            minimum_tls_version="TLS1_2",
            opts=opts,
        )
        share = storage.FileShare(
            f"{name}-share",
            resource_group_name=rg.name,
            account_name=account.name,
            share_name=cfg.share_name,
            share_quota=cfg.share_quota_gb,
            opts=opts,
        )
        key = storage.list_storage_account_keys_output(
            resource_group_name=rg.name, account_name=account.name
        )
        return account, share, pulumi.Output.secret(key.keys[0].value)


def deploy_workloads(
    w: Workloads,
    cfg: StackConfig,
    secrets: StackSecrets,
    image: pulumi.Input[str],
    account_name: pulumi.Input[str],
    account_key: pulumi.Input[str],
    share: pulumi.Resource,
) -> k8s.core.v1.Service:
    """Every pasture object in the namespace; returns the API Service. Per GPU pool: an
    agent DaemonSet, a device plugin DaemonSet and (``monitoring``) a DCGM exporter
    DaemonSet (none without GPU pools); the autoscaler placeholders' and the agents'
    PriorityClasses and (``monitoring``) kube-prometheus-stack. No PodDisruptionBudget
    covers task pods: one with ``maxUnavailable: 0`` made AKS refuse upgrades
    (UnsatisfiablePDB); an upgrade's drain evicts them and pasture requeues their jobs."""
    redis_password_secret(w, secrets.redis_password)
    secrets_key_secret(w, secrets.redis_password)
    cluster_share(w, cfg, account_name, account_key, share)
    redis_server(w, cfg)
    settings_config_map(w, cfg)
    scheduler_identity(w)
    scheduler_deployment(w, cfg, image)
    api = api_service(w, cfg)
    agent_rbac(w)
    if not cfg.gpu_pools:
        pulumi.log.warn("gpuPools is empty: no agent runs, so no task can be placed")
    else:
        agent_priority_class(w)
    for pool in cfg.gpu_pools:
        agent_daemonset(
            w,
            pool,
            image,
            credentials_url(w.namespace, cfg.api_port),
            dcgm_port=DCGM_PORT if cfg.monitoring else None,
        )
        device_plugin_daemonset(w, cfg, pool)
    placeholder_priority_class(w)
    monitoring(w, cfg, API_SERVICE)
    return api
