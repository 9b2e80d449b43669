"""The program body: config -> platform component -> exported ClusterOutputs.

Kept apart from ``__main__`` so tests run it under ``pulumi.runtime.set_mocks``. Each
platform module is imported only when used, so that a stack pays only for the
azure-native service packages it needs.
"""

from __future__ import annotations

from typing import Any

import pulumi

from stacks import config as stack_config
from stacks.contract import export_cluster_outputs


def run() -> Any:
    """Build the stack selected by ``pasture:platform``; returns the component.

    Raises:
        stacks.config.ConfigError: a bad config value (the message names the key).
    """
    cfg, secrets = stack_config.load()
    if cfg.platform == "azure":
        from stacks.azure_vm import AzureCluster, AzureClusterArgs

        cluster = AzureCluster(cfg.cluster_name, AzureClusterArgs(cfg))
        pulumi.export("resource_group", cluster.resource_group_name)
    elif cfg.platform == "aks":
        from stacks.aks import AksCluster, AksClusterArgs

        cluster = AksCluster(cfg.cluster_name, AksClusterArgs(cfg, secrets))
        pulumi.export("resource_group", cluster.resource_group_name)
        pulumi.export("kubeconfig", cluster.kubeconfig)
    else:
        from stacks.onprem import OnpremCluster, OnpremClusterArgs

        cluster = OnpremCluster(cfg.cluster_name, OnpremClusterArgs(cfg, secrets))
    export_cluster_outputs(cluster.outputs)
    if cfg.converge:
        from stacks.converge import Converge, ConvergeArgs

        Converge(
            f"{cfg.cluster_name}-converge",
            ConvergeArgs.from_config(cfg, cluster.outputs),
            opts=pulumi.ResourceOptions(depends_on=[cluster]),
        )
    return cluster
