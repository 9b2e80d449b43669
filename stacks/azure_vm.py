"""Azure VMs (MARO grass/azure): a master and node pools in one vnet, reached over SSH.

    ResourceGroup
      ├─ NetworkSecurityGroup   SSH + API port from allowedCidrs only (none by default)
      ├─ VirtualNetwork ─ Subnet (NSG attached)
      ├─ master: [PublicIPAddress] ─ NetworkInterface ─ VirtualMachine
      └─ per pool, per index i < count: NetworkInterface ─ VirtualMachine "<pool>-<i>"

VM names are ``<pool>-<index>`` and Pulumi resource names derive from them, so changing a
pool's ``count`` adds or removes only the highest indices. Every VM: SSH public key only
(password authentication disabled), cloud-init installs python3 for Ansible; Spot pools
use Spot priority with the configured eviction policy and max price.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import compute, network, resources

from stacks.config import NodePool, StackConfig
from stacks.contract import ClusterOutputs, HostOutput, NodeOutput, cluster_outputs

MASTER_NAME = "master"

# cloud-init: Ansible needs python3 on every host (Debian cloud images ship without apt's
# python bindings); nothing else is installed here, site.yml does the rest.
CLOUD_INIT = """#cloud-config
package_update: true
packages:
  - python3
  - python3-apt
  - sudo
"""


def vm_names(pool: NodePool) -> list[str]:
    """Names of a pool's VMs: ``<pool>-0 .. <pool>-<count-1>`` (stable per index)."""
    return [f"{pool.name}-{i}" for i in range(pool.count)]


def security_rules(allowed_cidrs: tuple[str, ...], api_port: int) -> list[dict[str, Any]]:
    """Inbound NSG rules: SSH (22) and the API port from each allowed CIDR, nothing else.

    Azure's default rules still allow traffic inside the vnet and deny the rest; with no
    allowed CIDRs no rule admits traffic from outside the vnet (never 0.0.0.0/0 by default).
    """
    rules = []
    for i, cidr in enumerate(allowed_cidrs):
        rules.append(
            {
                "name": f"allow-ssh-api-{i}",
                "priority": 100 + i,
                "direction": "Inbound",
                "access": "Allow",
                "protocol": "Tcp",
                "source_address_prefix": cidr,
                "source_port_range": "*",
                "destination_address_prefix": "*",
                "destination_port_ranges": ["22", str(api_port)],
            }
        )
    return rules


@dataclass(frozen=True)
class AzureClusterArgs:
    """Arguments of :class:`AzureCluster` (the validated stack config)."""

    config: StackConfig


class AzureCluster(pulumi.ComponentResource):
    """Master + node pools on Azure VMs; ``outputs`` is the ClusterOutputs dict output."""

    outputs: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: AzureClusterArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("pasture:azure:Cluster", name, None, opts)
        cfg = args.config
        child = pulumi.ResourceOptions(parent=self)

        rg = resources.ResourceGroup(
            f"{name}-rg",
            resource_group_name=cfg.resource_group_name or None,
            location=cfg.location,
            opts=child,
        )
        self.resource_group_name = rg.name
        nsg = network.NetworkSecurityGroup(
            f"{name}-nsg",
            resource_group_name=rg.name,
            location=rg.location,
            security_rules=security_rules(cfg.allowed_cidrs, cfg.api_port),
            opts=child,
        )
        vnet = network.VirtualNetwork(
            f"{name}-vnet",
            resource_group_name=rg.name,
            location=rg.location,
            address_space={"address_prefixes": [cfg.vnet_cidr]},
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["subnets"]),
        )
        subnet = network.Subnet(
            f"{name}-subnet",
            resource_group_name=rg.name,
            virtual_network_name=vnet.name,
            address_prefix=cfg.subnet_cidr,
            network_security_group={"id": nsg.id},
            opts=child,
        )

        public_ip = None
        if cfg.master_public_ip:
            public_ip = network.PublicIPAddress(
                f"{name}-{MASTER_NAME}-pip",
                resource_group_name=rg.name,
                location=rg.location,
                public_ip_allocation_method="Static",
                sku={"name": "Standard"},
                opts=child,
            )
        master_ip = self._vm(
            name,
            MASTER_NAME,
            rg,
            subnet,
            cfg,
            vm_size=cfg.master_vm_size,
            disk_gb=cfg.master_disk_gb,
            public_ip=public_ip,
            tags={"pasture-role": "master"},
        )

        node_ips: list[pulumi.Output[str]] = []
        node_specs: list[tuple[NodePool, str]] = []
        for pool in cfg.node_pools:
            for vm_name in vm_names(pool):
                node_ips.append(
                    self._vm(
                        name,
                        vm_name,
                        rg,
                        subnet,
                        cfg,
                        vm_size=pool.vm_size,
                        disk_gb=pool.disk_gb,
                        spot=pool,
                        tags={"pasture-role": "node", "pasture-pool": pool.name},
                    )
                )
                node_specs.append((pool, vm_name))

        def build(master_addr: str, public_addr: str | None, *addrs: str) -> ClusterOutputs:
            nodes = [
                NodeOutput(
                    name=vm_name,
                    address=addr,
                    ssh_user=cfg.admin_user,
                    cpu=pool.cpu,
                    memory_mib=pool.memory_mib,
                    gpu_count=pool.gpu_count,
                    gpu_model=pool.gpu_model,
                    labels={**pool.labels, "pool": pool.name, "spot": str(pool.spot).lower()},
                )
                for (pool, vm_name), addr in zip(node_specs, addrs, strict=True)
            ]
            return ClusterOutputs(
                platform="azure",
                cluster_name=cfg.cluster_name,
                master=HostOutput(
                    name=MASTER_NAME,
                    address=master_addr,
                    ssh_host=public_addr,
                    ssh_user=cfg.admin_user,
                ),
                nodes=nodes,
                share_name=cfg.share_name,
                api_endpoint=f"https://{master_addr}:{cfg.api_port}",
            )

        self.outputs = cluster_outputs(
            build, master_ip, public_ip.ip_address if public_ip else None, *node_ips
        )
        self.register_outputs({"cluster": self.outputs, "resource_group": rg.name})

    def _vm(
        self,
        prefix: str,
        vm_name: str,
        rg: resources.ResourceGroup,
        subnet: network.Subnet,
        cfg: StackConfig,
        *,
        vm_size: str,
        disk_gb: int,
        tags: dict[str, str],
        public_ip: network.PublicIPAddress | None = None,
        spot: NodePool | None = None,
    ) -> pulumi.Output[str]:
        """One NIC + VM; returns the VM's private address."""
        child = pulumi.ResourceOptions(parent=self)
        ip_config: dict[str, Any] = {
            "name": "primary",
            "subnet": {"id": subnet.id},
            "private_ip_allocation_method": "Dynamic",
        }
        if public_ip is not None:
            ip_config["public_ip_address"] = {"id": public_ip.id}
        nic = network.NetworkInterface(
            f"{prefix}-{vm_name}-nic",
            resource_group_name=rg.name,
            location=rg.location,
            ip_configurations=[ip_config],
            opts=child,
        )
        extra: dict[str, Any] = {}
        if spot is not None and spot.spot:
            extra = {
                "priority": "Spot",
                "eviction_policy": spot.spot_eviction_policy,
                "billing_profile": {"max_price": spot.spot_max_price},
            }
        compute.VirtualMachine(
            f"{prefix}-{vm_name}",
            vm_name=vm_name,
            resource_group_name=rg.name,
            location=rg.location,
            hardware_profile={"vm_size": vm_size},
            os_profile={
                "computer_name": vm_name,
                "admin_username": cfg.admin_user,
                "custom_data": base64.b64encode(CLOUD_INIT.encode()).decode(),
                "linux_configuration": {
                    "disable_password_authentication": True,
                    "ssh": {
                        "public_keys": [
                            {
                                "path": f"/home/{cfg.admin_user}/.ssh/authorized_keys",
                                "key_data": cfg.ssh_public_key,
                            }
                        ]
                    },
                },
            },
            storage_profile={
                "image_reference": cfg.image.model_dump(),
                "os_disk": {
                    "create_option": "FromImage",
                    "disk_size_gb": disk_gb,
                    "delete_option": "Delete",
                    "managed_disk": {"storage_account_type": "Premium_LRS"},
                },
            },
            network_profile={
                "network_interfaces": [{"id": nic.id, "primary": True, "delete_option": "Delete"}]
            },
            tags={**tags, "pasture-cluster": cfg.cluster_name},
            opts=child,
            **extra,
        )
        return nic.ip_configurations.apply(lambda confs: confs[0].private_ip_address)
