"""AKS (MARO k8s mode): the scheduler, Redis and the agents run in Kubernetes.

    ResourceGroup
      ├─ Registry (ACR) <── RoleAssignment AcrPull ── kubelet identity of
      ├─ ManagedCluster (system pool) ── AgentPool per GPU pool (taints, autoscaler min/max)
      ├─ StorageAccount ─ FileShare (the cluster share, Azure Files)
      └─ kubernetes.Provider (kubeconfig, secret) ──> namespace
            ├─ Secret redis password, Secret share account key
            ├─ PersistentVolume (file.csi.azure.com) + PVC "pasture-share"
            ├─ Redis StatefulSet (+ PVC template) + Service
            ├─ ConfigMap scheduler.yaml / agent.yaml
            ├─ Deployment pasture-scheduler (api + loop containers) + Service (LoadBalancer)
            ├─ ServiceAccount/Role/RoleBinding + DaemonSet pasture-agent on GPU pools
            │     (executor: kubernetes; binds task pods with nodeName)
            └─ DaemonSet nvidia-device-plugin on GPU pools

Scaling: edit a GPU pool's ``min_count``/``max_count`` (and ``count``) and ``pulumi up``;
the cluster autoscaler adds nodes when task pods need them, and each new node's agent
registers it with the scheduler. Nodes are not known when the stack runs, so the exported
ClusterOutputs has no nodes: Ansible does not converge an aks cluster.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_azure_native import (
    authorization,
    containerregistry,
    containerservice,
    resources,
    storage,
)

from scheduler.store.acl import agent_rules
from stacks.config import GpuPool, StackConfig, StackSecrets
from stacks.contract import ClusterOutputs, HostOutput, cluster_outputs

# Built-in role "AcrPull" (same id in every Azure subscription).
ACR_PULL_ROLE = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
SHARE_CLAIM = "pasture-share"
SHARE_MOUNT = "/mnt/pasture"
POOL_LABEL = "pasture/pool"


def pool_labels(pool: GpuPool) -> dict[str, str]:
    """Node labels of a GPU pool: its own labels plus ``pool`` and ``pasture/pool``."""
    return {**pool.labels, "pool": pool.name, POOL_LABEL: pool.name}


def tolerations(taints: list[str]) -> list[dict[str, str]]:
    """Tolerations (pod spec dicts) for ``key=value:Effect`` / ``key:Effect`` taints."""
    out = []
    for taint in taints:
        key_value, effect = taint.rsplit(":", 1)
        if "=" in key_value:
            key, value = key_value.split("=", 1)
            out.append({"key": key, "operator": "Equal", "value": value, "effect": effect})
        else:
            out.append({"key": key_value, "operator": "Exists", "effect": effect})
    return out


# Redis ACL user of the agent DaemonSet: one user for every node (per-node credentials
# would need a Secret per node); its rules are scheduler/store/acl.py's for node "*".
AGENT_USER = "pasture-agent"


def scheduler_settings(cfg: StackConfig) -> dict[str, Any]:
    """``/etc/pasture/scheduler.yaml`` of the in-cluster scheduler (contract 2)."""
    return {
        "cluster_name": cfg.cluster_name,
        "redis": {
            "url": f"redis://pasture-redis.{cfg.namespace}.svc:6379/0",
            "password_file": "/etc/pasture/secrets/redis-password",
        },
        "share_dir": SHARE_MOUNT,
        "api": {"host": "0.0.0.0", "port": cfg.api_port},
        "loop": {"policy": "pasture"},
    }


def agent_settings(cfg: StackConfig) -> dict[str, Any]:
    """``agent.yaml`` template of the agent DaemonSet; ``__NODE_NAME__`` and
    ``__NODE_ADDRESS__`` are replaced at start from the downward API."""
    return {
        "node_name": "__NODE_NAME__",
        "address": "__NODE_ADDRESS__",
        "redis": {  # the agents' own ACL user, not the admin password (docs/platforms.md)
            "url": f"redis://pasture-redis.{cfg.namespace}.svc:6379/0",
            "username": AGENT_USER,
            "password_file": "/etc/pasture/secrets/agent-password",
        },
        "share_dir": SHARE_MOUNT,
        "executor": "kubernetes",
        "task_network": "host",
        "work_dir": "/var/lib/pasture",
    }


@dataclass(frozen=True)
class AksClusterArgs:
    """Arguments of :class:`AksCluster`: validated config and secrets."""

    config: StackConfig
    secrets: StackSecrets


class AksCluster(pulumi.ComponentResource):
    """AKS with GPU pools and the pasture workloads; ``outputs`` is ClusterOutputs,
    ``kubeconfig`` a secret output."""

    outputs: pulumi.Output[dict[str, Any]]
    kubeconfig: pulumi.Output[str]

    def __init__(
        self, name: str, args: AksClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("pasture:aks:Cluster", name, None, opts)
        cfg, secrets = args.config, args.secrets
        child = pulumi.ResourceOptions(parent=self)

        rg = resources.ResourceGroup(
            f"{name}-rg",
            resource_group_name=cfg.resource_group_name or None,
            location=cfg.location,
            opts=child,
        )
        self.resource_group_name = rg.name
        registry = containerregistry.Registry(
            f"{name.replace('-', '')}acr",
            resource_group_name=rg.name,
            location=rg.location,
            sku={"name": cfg.acr_sku},
            admin_user_enabled=False,
            opts=child,
        )
        cluster_args: dict[str, Any] = {
            "resource_group_name": rg.name,
            "location": rg.location,
            "dns_prefix": cfg.cluster_name,
            "identity": {"type": "SystemAssigned"},
            "enable_rbac": True,
            "agent_pool_profiles": [
                {
                    "name": "system",
                    "mode": "System",
                    "count": cfg.system_pool.count,
                    "vm_size": cfg.system_pool.vm_size,
                    "os_disk_size_gb": cfg.system_pool.disk_gb,
                    "os_type": "Linux",
                    "type": "VirtualMachineScaleSets",
                }
            ],
            "network_profile": {"network_plugin": "azure", "network_plugin_mode": "overlay"},
        }
        if cfg.kubernetes_version:
            cluster_args["kubernetes_version"] = cfg.kubernetes_version
        if cfg.allowed_cidrs:
            cluster_args["api_server_access_profile"] = {
                "authorized_ip_ranges": list(cfg.allowed_cidrs)
            }
        cluster = containerservice.ManagedCluster(f"{name}-aks", **cluster_args, opts=child)

        gpu_pools = []
        for pool in cfg.gpu_pools:
            spot: dict[str, Any] = {}
            if pool.spot:
                spot = {
                    "scale_set_priority": "Spot",
                    "scale_set_eviction_policy": "Delete",
                    "spot_max_price": -1,
                }
            gpu_pools.append(
                containerservice.AgentPool(
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
                    node_taints=list(pool.taints),
                    node_labels=pool_labels(pool),
                    opts=pulumi.ResourceOptions(parent=self, ignore_changes=["count"]),
                    **spot,
                )
            )

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
            opts=child,
        )

        account = storage.StorageAccount(
            f"{name.replace('-', '')}share",
            resource_group_name=rg.name,
            location=rg.location,
            kind="StorageV2",
            sku={"name": "Standard_LRS"},
            allow_blob_public_access=False,
            enable_https_traffic_only=True,
            minimum_tls_version="TLS1_2",
            opts=child,
        )
        share = storage.FileShare(
            f"{name}-share",
            resource_group_name=rg.name,
            account_name=account.name,
            share_name=cfg.share_name,
            share_quota=cfg.share_quota_gb,
            opts=child,
        )
        account_key = pulumi.Output.secret(
            storage.list_storage_account_keys_output(
                resource_group_name=rg.name, account_name=account.name
            )
            .keys[0]
            .value
        )

        creds = containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=rg.name, resource_name=cluster.name
        )
        self.kubeconfig = pulumi.Output.secret(
            creds.kubeconfigs[0].value.apply(lambda v: base64.b64decode(v).decode())
        )
        provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self, depends_on=gpu_pools),
        )
        api_service = self._workloads(
            name, cfg, secrets, provider, registry, account.name, account_key, share
        )

        def build(lb_ip: str) -> ClusterOutputs:
            return ClusterOutputs(
                platform="aks",
                cluster_name=cfg.cluster_name,
                master=HostOutput(name="master", address=lb_ip, connection="local"),
                nodes=[],
                share_name=cfg.share_name,
                api_endpoint=f"http://{lb_ip}:{cfg.api_port}",
            )

        lb_ip = api_service.status.apply(lambda s: s.load_balancer.ingress[0].ip)
        self.outputs = cluster_outputs(build, lb_ip)
        self.register_outputs({"cluster": self.outputs, "kubeconfig": self.kubeconfig})

    def _workloads(
        self,
        name: str,
        cfg: StackConfig,
        secrets: StackSecrets,
        provider: k8s.Provider,
        registry: containerregistry.Registry,
        account_name: pulumi.Output[str],
        account_key: pulumi.Output[str],
        share: storage.FileShare,
    ) -> k8s.core.v1.Service:
        """The pasture workloads on the cluster (all through ``provider``); returns the API
        Service."""
        opts = pulumi.ResourceOptions(parent=self, provider=provider)
        ns = cfg.namespace
        image = registry.login_server.apply(lambda server: f"{server}/{cfg.pasture_image}")
        meta = lambda n: {"name": n, "namespace": ns}  # noqa: E731 - tiny helper

        namespace = k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": ns}, opts=opts)
        opts = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[namespace])
        k8s.core.v1.Secret(
            f"{name}-redis-secret",
            metadata=meta("pasture-redis"),
            string_data={"redis-password": secrets.redis_password},
            opts=opts,
        )
        # The agents' password, derived from the admin one (sha256, not reversible): agents
        # mount only this Secret and log in as AGENT_USER, confined by scheduler/store/acl.py
        agent_password = pulumi.Output.secret(secrets.redis_password).apply(
            lambda pw: hashlib.sha256(f"{pw}:{AGENT_USER}".encode()).hexdigest()
        )
        k8s.core.v1.Secret(
            f"{name}-redis-agent-secret",
            metadata=meta("pasture-redis-agent"),
            string_data={"agent-password": agent_password},
            opts=opts,
        )
        k8s.core.v1.Secret(
            f"{name}-share-secret",
            metadata=meta("pasture-share"),
            string_data={
                "azurestorageaccountname": account_name,
                "azurestorageaccountkey": account_key,
            },
            opts=opts,
        )
        pv_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[share]))
        pv = k8s.core.v1.PersistentVolume(
            f"{name}-share-pv",
            metadata={"name": f"{ns}-share"},
            spec={
                "capacity": {"storage": f"{cfg.share_quota_gb}Gi"},
                "access_modes": ["ReadWriteMany"],
                "persistent_volume_reclaim_policy": "Retain",
                "storage_class_name": "",
                "mount_options": ["dir_mode=0777", "file_mode=0666", "mfsymlinks", "nobrl"],
                "csi": {
                    "driver": "file.csi.azure.com",
                    "volume_handle": f"{ns}-{cfg.share_name}",
                    "volume_attributes": {"shareName": cfg.share_name},
                    "node_stage_secret_ref": {"name": "pasture-share", "namespace": ns},
                },
            },
            opts=pv_opts,
        )
        k8s.core.v1.PersistentVolumeClaim(
            f"{name}-share-pvc",
            metadata=meta(SHARE_CLAIM),
            spec={
                "access_modes": ["ReadWriteMany"],
                "storage_class_name": "",
                "volume_name": pv.metadata["name"],
                "resources": {"requests": {"storage": f"{cfg.share_quota_gb}Gi"}},
            },
            opts=opts,
        )

        # Redis: the only state of the scheduler.
        redis_labels = {"app.kubernetes.io/name": "pasture-redis"}
        k8s.core.v1.Service(
            f"{name}-redis-svc",
            metadata=meta("pasture-redis"),
            spec={
                "selector": redis_labels,
                "ports": [{"name": "redis", "port": 6379, "target_port": 6379}],
            },
            opts=opts,
        )
        k8s.apps.v1.StatefulSet(
            f"{name}-redis",
            metadata=meta("pasture-redis"),
            spec={
                "service_name": "pasture-redis",
                "replicas": 1,
                "selector": {"match_labels": redis_labels},
                "template": {
                    "metadata": {"labels": redis_labels},
                    "spec": {
                        "node_selector": {"kubernetes.azure.com/mode": "system"},
                        "containers": [
                            {
                                "name": "redis",
                                "image": cfg.redis_image,
                                "args": [
                                    "--requirepass",
                                    "$(REDIS_PASSWORD)",
                                    "--appendonly",
                                    "yes",
                                    *["--user", AGENT_USER, "reset", "on", ">$(AGENT_PASSWORD)"],
                                    *["resetchannels", *agent_rules("*")],
                                ],
                                "env": [
                                    {
                                        "name": "REDIS_PASSWORD",
                                        "value_from": {
                                            "secret_key_ref": {
                                                "name": "pasture-redis",
                                                "key": "redis-password",
                                            }
                                        },
                                    },
                                    {
                                        "name": "AGENT_PASSWORD",
                                        "value_from": {
                                            "secret_key_ref": {
                                                "name": "pasture-redis-agent",
                                                "key": "agent-password",
                                            }
                                        },
                                    },
                                ],
                                "ports": [{"container_port": 6379, "name": "redis"}],
                                "volume_mounts": [{"name": "data", "mount_path": "/data"}],
                            }
                        ],
                    },
                },
                "volume_claim_templates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "access_modes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": f"{cfg.redis_storage_gb}Gi"}},
                        },
                    }
                ],
            },
            opts=opts,
        )

        k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata=meta("pasture-config"),
            data={
                "scheduler.yaml": yaml.safe_dump(scheduler_settings(cfg), sort_keys=False),
                "agent.yaml": yaml.safe_dump(agent_settings(cfg), sort_keys=False),
            },
            opts=opts,
        )
        secret_volumes = [
            {"name": "config", "config_map": {"name": "pasture-config"}},
            {"name": "redis-secret", "secret": {"secret_name": "pasture-redis"}},
            {
                "name": "share",
                "persistent_volume_claim": {"claim_name": SHARE_CLAIM},
            },
        ]
        mounts = [
            {"name": "config", "mount_path": "/etc/pasture/config", "read_only": True},
            {"name": "redis-secret", "mount_path": "/etc/pasture/secrets", "read_only": True},
            {"name": "share", "mount_path": SHARE_MOUNT},
        ]

        # The scheduler: API and loop in one pod (one loop at a time: Recreate).
        sched_labels = {"app.kubernetes.io/name": "pasture-scheduler"}
        config_arg = "/etc/pasture/config/scheduler.yaml"
        k8s.apps.v1.Deployment(
            f"{name}-scheduler",
            metadata=meta("pasture-scheduler"),
            spec={
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"match_labels": sched_labels},
                "template": {
                    "metadata": {"labels": sched_labels},
                    "spec": {
                        "node_selector": {"kubernetes.azure.com/mode": "system"},
                        "containers": [
                            {
                                "name": "api",
                                "image": image,
                                "command": ["pasture", "serve", "api", "--config", config_arg],
                                "ports": [{"container_port": cfg.api_port, "name": "api"}],
                                "volume_mounts": mounts,
                                "readiness_probe": {
                                    "tcp_socket": {"port": cfg.api_port},
                                    "period_seconds": 5,
                                },
                            },
                            {
                                "name": "loop",
                                "image": image,
                                "command": ["pasture", "serve", "loop", "--config", config_arg],
                                "volume_mounts": mounts,
                            },
                        ],
                        "volumes": secret_volumes,
                    },
                },
            },
            opts=opts,
        )
        service_spec: dict[str, Any] = {
            "type": "LoadBalancer",
            "selector": sched_labels,
            "ports": [{"name": "api", "port": cfg.api_port, "target_port": cfg.api_port}],
        }
        annotations = {}
        if cfg.allowed_cidrs:
            service_spec["load_balancer_source_ranges"] = list(cfg.allowed_cidrs)
        else:  # reachable only inside the vnet
            annotations["service.beta.kubernetes.io/azure-load-balancer-internal"] = "true"
        api_service = k8s.core.v1.Service(
            f"{name}-api",
            metadata={**meta("pasture-api"), "annotations": annotations},
            spec=service_spec,
            opts=opts,
        )

        # Agents: one per GPU node, binding task pods to their own node.
        gpu_taints = sorted({t for p in cfg.gpu_pools for t in p.taints})
        pool_names = [p.name for p in cfg.gpu_pools]
        gpu_affinity = {
            "node_affinity": {
                "required_during_scheduling_ignored_during_execution": {
                    "node_selector_terms": [
                        {
                            "match_expressions": [
                                {"key": POOL_LABEL, "operator": "In", "values": pool_names}
                            ]
                        }
                    ]
                }
            }
        }
        k8s.core.v1.ServiceAccount(f"{name}-agent-sa", metadata=meta("pasture-agent"), opts=opts)
        k8s.rbac.v1.Role(
            f"{name}-agent-role",
            metadata=meta("pasture-agent"),
            rules=[
                {
                    "api_groups": [""],
                    "resources": ["pods"],
                    "verbs": ["create", "get", "list", "watch", "delete"],
                },
                {"api_groups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            ],
            opts=opts,
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-agent-binding",
            metadata=meta("pasture-agent"),
            role_ref={
                "api_group": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pasture-agent",
            },
            subjects=[{"kind": "ServiceAccount", "name": "pasture-agent", "namespace": ns}],
            opts=opts,
        )
        agent_labels = {"app.kubernetes.io/name": "pasture-agent"}
        start_agent = (
            'mkdir -p /etc/pasture && sed -e "s/__NODE_NAME__/$NODE_NAME/" '
            '-e "s/__NODE_ADDRESS__/$NODE_ADDRESS/" /etc/pasture/config/agent.yaml '
            "> /etc/pasture/agent.yaml && exec pasture agent run --config /etc/pasture/agent.yaml"
        )
        k8s.apps.v1.DaemonSet(
            f"{name}-agent",
            metadata=meta("pasture-agent"),
            spec={
                "selector": {"match_labels": agent_labels},
                "template": {
                    "metadata": {"labels": agent_labels},
                    "spec": {
                        "service_account_name": "pasture-agent",
                        "host_network": True,
                        "dns_policy": "ClusterFirstWithHostNet",
                        "affinity": gpu_affinity,
                        "tolerations": tolerations(gpu_taints),
                        "containers": [
                            {
                                "name": "agent",
                                "image": image,
                                "command": ["/bin/sh", "-c", start_agent],
                                "env": [
                                    {
                                        "name": "NODE_NAME",
                                        "value_from": {
                                            "field_ref": {"field_path": "spec.nodeName"}
                                        },
                                    },
                                    {
                                        "name": "NODE_ADDRESS",
                                        "value_from": {
                                            "field_ref": {"field_path": "status.hostIP"}
                                        },
                                    },
                                    {"name": "PASTURE_K8S_NAMESPACE", "value": ns},
                                    {"name": "PASTURE_K8S_SHARE_CLAIM", "value": SHARE_CLAIM},
                                    {"name": "PASTURE_K8S_IMAGE", "value": image},
                                    {
                                        "name": "PASTURE_K8S_TOLERATIONS",
                                        "value": json.dumps(gpu_taints),
                                    },
                                ],
                                "volume_mounts": mounts,
                            }
                        ],
                        "volumes": [  # the agent's Redis password, not the admin one
                            {"name": v["name"], "secret": {"secret_name": "pasture-redis-agent"}}
                            if v["name"] == "redis-secret"
                            else v
                            for v in secret_volumes
                        ],
                    },
                },
            },
            opts=opts,
        )

        # NVIDIA device plugin: advertises nvidia.com/gpu on the GPU nodes.
        plugin_labels = {"app.kubernetes.io/name": "nvidia-device-plugin"}
        k8s.apps.v1.DaemonSet(
            f"{name}-nvidia-device-plugin",
            metadata=meta("nvidia-device-plugin"),
            spec={
                "selector": {"match_labels": plugin_labels},
                "update_strategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": plugin_labels},
                    "spec": {
                        "affinity": gpu_affinity,
                        "tolerations": tolerations(gpu_taints)
                        + [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [
                            {
                                "name": "nvidia-device-plugin",
                                "image": cfg.device_plugin_image,
                                "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                                "security_context": {
                                    "allow_privilege_escalation": False,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                "volume_mounts": [
                                    {
                                        "name": "device-plugin",
                                        "mount_path": "/var/lib/kubelet/device-plugins",
                                    }
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "device-plugin",
                                "host_path": {"path": "/var/lib/kubelet/device-plugins"},
                            }
                        ],
                    },
                },
            },
            opts=opts,
        )
        return api_service
