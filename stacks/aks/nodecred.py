"""Per-node Redis credentials on AKS (scheduler/nodecred.py has the exchange and why):

    ServiceAccount pasture-scheduler (the API and loop pod)
        ── ClusterRoleBinding <namespace>-scheduler-tokenreview -> system:auth-delegator
           (create tokenreviews: the API verifies the agents' tokens)
        ── Role/RoleBinding pasture-scheduler: pods get (the pod a token is bound to)
    agent pods: projected ServiceAccount token, audience pasture-node-credentials, 1 h,
        at /var/run/secrets/pasture/token; an in-memory emptyDir /run/pasture for the
        node password the start script fetches (FETCH_CREDENTIAL) before the agent runs.

Not exercised against AKS here (no cluster on the test machine): the resources are checked
with Pulumi mocks (tests/stacks/test_aks.py), the exchange with a real API and redis-server.
"""

from __future__ import annotations

from typing import Any

import pulumi_kubernetes as k8s

from scheduler.nodecred import AUDIENCE
from stacks.aks.common import Workloads
from stacks.aks.redis import NODE_PASSWORD_FILE

SCHEDULER_SA = "pasture-scheduler"
TOKEN_DIR = "/var/run/secrets/pasture"
TOKEN_EXPIRY_S = 3600
URL_ENV = "PASTURE_NODE_CREDENTIALS_URL"
FETCH_CREDENTIAL = (
    f'python3 -m scheduler.agent.credential --url "${URL_ENV}" '
    f"--token-file {TOKEN_DIR}/token --password-file {NODE_PASSWORD_FILE} >/dev/null"
)
"""Start-script step of the agent container: exchange the token for the node's password."""


def credentials_url(namespace: str, port: int) -> str:
    """The in-cluster URL of the exchange (the API Service; plain HTTP inside the cluster,
    like the agents' Redis traffic)."""
    return f"http://pasture-api.{namespace}.svc:{port}/api/v1/node-credentials"


def agent_volumes() -> list[dict[str, Any]]:
    """The agent pod's token volume and the in-memory directory of its node password."""
    return [
        {
            "name": "node-token",
            "projected": {
                "sources": [
                    {
                        "service_account_token": {
                            "audience": AUDIENCE,
                            "expiration_seconds": TOKEN_EXPIRY_S,
                            "path": "token",
                        }
                    }
                ]
            },
        },
        {"name": "node-credential", "empty_dir": {"medium": "Memory"}},
    ]


def agent_mounts() -> list[dict[str, Any]]:
    """Mounts matching :func:`agent_volumes`."""
    return [
        {"name": "node-token", "mount_path": TOKEN_DIR, "read_only": True},
        {"name": "node-credential", "mount_path": str(NODE_PASSWORD_FILE.parent)},
    ]


SCHEDULER_CLUSTER_RULES: list[dict[str, Any]] = [
    {"api_groups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"api_groups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
]
"""The loop's cluster-wide rights: Node objects and the pods of every namespace (DaemonSets
and kube-system pods hold capacity the kubelet counts)."""
AGENT_CLUSTER_RULES: list[dict[str, Any]] = [
    {"api_groups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
]
"""The agent's cluster-wide rights: read its Node's allocatable and label it
``pasture.io/registered`` so that placeholders keep off it."""


def scheduler_identity(w: Workloads) -> k8s.core.v1.ServiceAccount:
    """The scheduler pod's ServiceAccount, allowed to review tokens, read pods, manage the
    autoscaler's placeholder pods and read node objects."""
    sa = k8s.core.v1.ServiceAccount(
        f"{w.prefix}-scheduler-sa", metadata=w.meta(SCHEDULER_SA), opts=w.opts
    )
    subjects = [{"kind": "ServiceAccount", "name": SCHEDULER_SA, "namespace": w.namespace}]
    k8s.rbac.v1.ClusterRoleBinding(
        f"{w.prefix}-scheduler-tokenreview",
        metadata={"name": f"{w.namespace}-scheduler-tokenreview"},
        role_ref={
            "api_group": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:auth-delegator",
        },
        subjects=subjects,
        opts=w.opts,
    )
    k8s.rbac.v1.Role(
        f"{w.prefix}-scheduler-role",
        metadata=w.meta(SCHEDULER_SA),
        # get: agents' pods (token review); create/list/delete: the autoscaler's
        # placeholder pods (scheduler/k8s/autoscale.py)
        rules=[
            {
                "api_groups": [""],
                "resources": ["pods"],
                "verbs": ["get", "list", "create", "delete"],
            },
            # the cluster autoscaler's NotTriggerScaleUp events reach a job's reason
            {"api_groups": [""], "resources": ["events"], "verbs": ["list", "watch"]},
        ],
        opts=w.opts,
    )
    # is a silent node's Node object gone? (scheduler/rules/health.py, node_gone); what
    # every pod on a node holds (scheduler/k8s/nodes.py's informers list and watch both)
    node_reader(w, "scheduler", subjects, SCHEDULER_CLUSTER_RULES)
    k8s.rbac.v1.RoleBinding(
        f"{w.prefix}-scheduler-binding",
        metadata=w.meta(SCHEDULER_SA),
        role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "Role", "name": SCHEDULER_SA},
        subjects=subjects,
        opts=w.opts,
    )
    return sa


def node_reader(
    w: Workloads, who: str, subjects: list[dict[str, Any]], rules: list[dict[str, Any]]
) -> None:
    """A ClusterRole ``<namespace>-<who>-nodes`` with ``rules`` over cluster-scoped views
    (Node objects, pods of every namespace), bound to ``subjects``: a namespaced Role cannot
    grant them. The loop's informers list and watch Nodes and every pod (capacity net of
    DaemonSets and other pods, scheduler/k8s/nodes.py); the agent reads its Node and
    labels it registered (agent/kubernetes.py)."""
    nodes_role = f"{w.namespace}-{who}-nodes"  # cluster-wide: named after the namespace
    k8s.rbac.v1.ClusterRole(
        f"{w.prefix}-{who}-nodes",
        metadata={"name": nodes_role},
        rules=rules,
        opts=w.opts,
    )
    k8s.rbac.v1.ClusterRoleBinding(
        f"{w.prefix}-{who}-nodes-binding",
        metadata={"name": nodes_role},
        role_ref={
            "api_group": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": nodes_role,
        },
        subjects=subjects,
        opts=w.opts,
    )
