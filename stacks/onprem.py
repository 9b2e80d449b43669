"""Existing hosts (MARO grass/on-premises): adopted over SSH, facts recorded, drained on
removal (pulumi-command resources, stacks/onprem_host.py).

    master ─ OnpremHost (facts)          hosts[i] ─ OnpremHost (facts) ─> NodeOutput
                                                    └ drain: on delete
                                                      POST /api/v1/nodes/<name>/drain

Adding a host to ``pasture:hosts`` adopts it on the next ``pulumi up``; removing it drains
its node through the pasture API first (``apiToken``), so no task is lost silently. Host
keys come from ``pasture:sshKnownHosts`` and are always verified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from stacks.config import ConfigError, StackConfig, StackSecrets
from stacks.config import OnpremHost as HostConfig
from stacks.contract import ClusterOutputs, HostOutput, NodeOutput, cluster_outputs
from stacks.hostops import HostOpError, known_host_key
from stacks.onprem_host import HostArgs, OnpremHost


@dataclass(frozen=True)
class OnpremClusterArgs:
    """Arguments of :class:`OnpremCluster`: the validated config and its secrets."""

    config: StackConfig
    secrets: StackSecrets


def api_endpoint(cfg: StackConfig) -> str:
    """The pasture API URL: ``apiEndpoint`` or ``https://<master address>:<apiPort>``."""
    assert cfg.master is not None  # validated for platform onprem
    return cfg.api_endpoint or f"https://{cfg.master.address}:{cfg.api_port}"


class OnpremCluster(pulumi.ComponentResource):
    """The master and node hosts of an on-prem cluster; ``outputs`` is ClusterOutputs."""

    outputs: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: OnpremClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("pasture:onprem:Cluster", name, None, opts)
        cfg, secrets = args.config, args.secrets
        assert cfg.master is not None
        endpoint = api_endpoint(cfg)

        def host(h: HostConfig, role: str) -> OnpremHost:
            try:
                key = known_host_key(
                    cfg.ssh_known_hosts, h.ssh_host or h.address, h.ssh_port, name=h.name
                )
            except HostOpError as exc:
                raise ConfigError(str(exc)) from None
            return OnpremHost(
                f"{name}-{h.name}",
                HostArgs(
                    host=h,
                    role=role,
                    private_key=secrets.ssh_private_key,
                    host_key=key,
                    api_endpoint=endpoint,
                    api_token=secrets.api_token,
                    api_ca_file=cfg.api_ca_file,
                    drain_on_delete=cfg.drain_on_delete,
                    drain_timeout_s=cfg.drain_timeout_s,
                ),
                pulumi.ResourceOptions(parent=self),
            )

        master = host(cfg.master, "master")
        nodes = [host(h, "node") for h in cfg.hosts]

        def build(_master_facts: dict, *facts: dict) -> ClusterOutputs:
            m = cfg.master
            return ClusterOutputs(
                platform="onprem",
                cluster_name=cfg.cluster_name,
                master=HostOutput(
                    name=m.name,
                    address=m.address,
                    ssh_host=m.ssh_host,
                    ssh_user=m.ssh_user,
                    ssh_port=m.ssh_port,
                ),
                nodes=[
                    NodeOutput(
                        name=h.name,
                        address=h.address,
                        ssh_host=h.ssh_host,
                        ssh_user=h.ssh_user,
                        ssh_port=h.ssh_port,
                        # Pulumi drops None values from outputs: absent = None / 0.
                        cpu=int(f["cpu"]),
                        memory_mib=int(f["memory_mib"]),
                        gpu_count=int(f.get("gpu_count") or 0),
                        gpu_model=f.get("gpu_model"),
                        labels=h.labels,
                    )
                    for h, f in zip(cfg.hosts, facts, strict=True)
                ],
                share_name=cfg.share_name,
                api_endpoint=endpoint,
            )

        self.hosts = {
            "master": master,
            **{h.name: r for h, r in zip(cfg.hosts, nodes, strict=True)},
        }
        self.outputs = cluster_outputs(build, master.facts, *[n.facts for n in nodes])
        self.register_outputs({"cluster": self.outputs})
