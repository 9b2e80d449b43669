"""Contract 2 for the in-cluster pasture: scheduler.yaml and the agent.yaml template,
built as the scheduler's own settings models (:mod:`scheduler.settings`) and dumped with
only the fields set here, so that a field the models do not know fails at ``pulumi up``.

The agents' file is a template: ``PASTURE_NODE_NAME`` / ``PASTURE_NODE_ADDRESS`` are
replaced at start from the downward API, ``PASTURE_NODE_POOL`` (the node label
``pasture/pool``) from the DaemonSet's pool (see :mod:`stacks.aks.agents`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scheduler.settings import (
    AgentSettings,
    ApiSettings,
    LoopSettings,
    NodeCredentialSettings,
    SchedulerSettings,
)
from stacks.aks.common import SHARE_MOUNT
from stacks.aks.redis import PASSWORD_FILE, agent_redis_settings, redis_settings
from stacks.aks.sealkey import KEY_FILE
from stacks.config import StackConfig

NODE_NAME_PLACEHOLDER = "PASTURE_NODE_NAME"
NODE_ADDRESS_PLACEHOLDER = "PASTURE_NODE_ADDRESS"
NODE_POOL_PLACEHOLDER = "PASTURE_NODE_POOL"
WORK_DIR = Path("/var/lib/pasture")  # the agents' work_dir: a hostPath (stacks.aks.agents)


def scheduler_settings(cfg: StackConfig) -> SchedulerSettings:
    """``scheduler.yaml`` of the in-cluster API and loop."""
    return SchedulerSettings(
        cluster_name=cfg.cluster_name,
        redis=redis_settings(cfg.namespace),
        share_dir=Path(SHARE_MOUNT),
        api=ApiSettings(
            host="0.0.0.0",
            port=cfg.api_port,
            # agents get their node's own Redis user (scheduler/nodecred.py); node
            # passwords derive from the admin password (sha256, not reversible)
            node_credentials=NodeCredentialSettings(
                namespace=cfg.namespace, secret_file=Path(PASSWORD_FILE)
            ),
        ),
        loop=LoopSettings(policy="pasture"),
        secrets_key_file=KEY_FILE,  # seals job secrets at submit (stacks/aks/sealkey.py)
    )


def agent_settings(cfg: StackConfig) -> AgentSettings:
    """``agent.yaml`` template of the agent DaemonSets (executor ``kubernetes``)."""
    return AgentSettings(
        node_name=NODE_NAME_PLACEHOLDER,
        address=NODE_ADDRESS_PLACEHOLDER,
        redis=agent_redis_settings(cfg.namespace, NODE_NAME_PLACEHOLDER),
        share_dir=Path(SHARE_MOUNT),
        executor="kubernetes",
        task_network="host",
        work_dir=WORK_DIR,
        labels={"pasture/pool": NODE_POOL_PLACEHOLDER},  # the loop's autoscaler counts by it
        secrets_key_file=KEY_FILE,  # opens them at a task's start-up
    )


def to_yaml(settings: SchedulerSettings | AgentSettings) -> str:
    """The settings file text: the fields set explicitly, in model order."""
    data: dict[str, Any] = settings.model_dump(mode="json", exclude_unset=True)
    return yaml.safe_dump(data, sort_keys=False)
