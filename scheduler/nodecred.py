"""Per-node Redis credentials for Kubernetes agents, exchanged for a pod's ServiceAccount
token (the master's side; the agent's is :mod:`scheduler.agent.credential`).

On AKS every node's agent is a pod of one DaemonSet, so a Secret mounted into it would be
the same for every node: a stolen copy could impersonate any node. Instead each agent, at
start, sends the API a projected ServiceAccount token of its own pod (audience
:data:`AUDIENCE`, an hour's lifetime, bound to the pod) and gets back the credential of its
node's own ACL user ``node-<name>`` (:mod:`scheduler.store.acl`), which the API creates or
refreshes on Redis (``ACL SETUSER``) with the password ``sha256("<secret>:<node>")``
(:func:`scheduler.store.acl.node_password`, the scheme the redis role uses on VMs).

    agent pod ──POST /api/v1/node-credentials {token}──> API
        API ──TokenReview (audience pasture-node-credentials)──> kube-apiserver:
               authenticated, system:serviceaccount:<ns>:pasture-agent,
               extra authentication.kubernetes.io/{node-name,pod-name,pod-uid}
        API ──get pod <pod-name>──> its uid, nodeName, serviceAccountName and controller
               (a DaemonSet pasture-agent-<pool>) must match
        API ──ACL SETUSER node-<node-name> ...──> Redis;  <── {username, password}

Why the node is the one the token names and the pod is checked too: Kubernetes (>= 1.30,
``ServiceAccountTokenPodNodeInfo``) writes the node of the pod a token is bound to into
the token, and TokenReview returns it in ``user.extra``; the pod check refuses a pod that
some other creator (an agent may create pods in the namespace) gave the agents' service
account. The token itself stops working when the pod is deleted.

What a stolen credential can do: a node password impersonates only its node (its own keys
and report stream, :mod:`scheduler.store.acl`); a stolen token, for its hour, yields only
its own node's password. Not tested against a cluster here (none on the test machine):
:func:`node_of` and :func:`issue` are tested with TokenReview / Pod documents of the
documented shape and a real redis-server; :class:`KubeReviewer` is the thin client call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.store.acl import NODE_NAME, node_password, node_user, set_agent_user
from scheduler.store.store import DEFAULT_PREFIX

AUDIENCE = "pasture-node-credentials"
"""Audience of the projected token the agents send (TokenReview checks it)."""

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"


class CredentialRefused(Exception):
    """The token does not prove an agent pod of a node (the message says which check)."""


@dataclass(frozen=True)
class NodeCredential:
    """A node's Redis ACL user and its password."""

    node: str
    username: str
    password: str


class Reviewer(Protocol):
    """What :func:`exchange` needs of Kubernetes: the TokenReview and the pod it names."""

    def review(self, token: str) -> dict[str, Any]:
        """The TokenReview (wire form: ``{"status": {...}}``) of ``token`` for
        :data:`AUDIENCE`."""

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod (wire form), None when it does not exist."""


def _one(extra: dict[str, Any], key: str) -> str:
    values = extra.get(key) or []
    if len(values) != 1 or not isinstance(values[0], str):
        raise CredentialRefused(
            f"the token's user.extra[{key!r}] must hold one value, got {values!r} "
            "(tokens name their pod's node from Kubernetes 1.30 on)"
        )
    return values[0]


def node_of(
    review: dict[str, Any],
    pod: dict[str, Any] | None,
    namespace: str,
    service_account: str,
    daemonset_prefix: str,
) -> str:
    """The node whose agent sent the reviewed token.

    Args:
        review: the TokenReview answer, wire form (``status.authenticated``,
            ``status.audiences``, ``status.user.username`` / ``extra``).
        pod: the pod the token is bound to (wire form), None when it is gone.
        namespace, service_account: the agents' (``system:serviceaccount:<ns>:<sa>``).
        daemonset_prefix: the pod's controller must be a DaemonSet named with it.

    Returns:
        The node name (``[A-Za-z0-9][A-Za-z0-9_.-]*``).

    Raises:
        CredentialRefused: naming the first check that failed.
    """
    status = review.get("status") or {}
    if status.get("authenticated") is not True:
        raise CredentialRefused(f"token not authenticated: {status.get('error') or 'no reason'}")
    if AUDIENCE not in (status.get("audiences") or []):
        raise CredentialRefused(f"token audiences {status.get('audiences')!r} lack {AUDIENCE!r}")
    user = status.get("user") or {}
    want = f"system:serviceaccount:{namespace}:{service_account}"
    if user.get("username") != want:
        raise CredentialRefused(f"token user must be {want}, got {user.get('username')!r}")
    extra = user.get("extra") or {}
    node, pod_name, pod_uid = (
        _one(extra, k) for k in (NODE_NAME_EXTRA, POD_NAME_EXTRA, POD_UID_EXTRA)
    )
    if not NODE_NAME.fullmatch(node):
        raise CredentialRefused(f"node name {node!r} is not a valid pasture node name")
    if pod is None:
        raise CredentialRefused(f"pod {namespace}/{pod_name} of the token no longer exists")
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if meta.get("uid") != pod_uid:
        raise CredentialRefused(f"pod {pod_name}: uid {meta.get('uid')!r} is not the token's")
    if spec.get("nodeName") != node:
        raise CredentialRefused(f"pod {pod_name} runs on {spec.get('nodeName')!r}, not {node}")
    if spec.get("serviceAccountName") != service_account:
        raise CredentialRefused(f"pod {pod_name} does not run as {service_account}")
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if not any(
        o.get("kind") == "DaemonSet" and str(o.get("name", "")).startswith(daemonset_prefix)
        for o in owners
    ):
        raise CredentialRefused(
            f"pod {pod_name} is not controlled by a DaemonSet {daemonset_prefix}*: {owners!r}"
        )
    return node


def issue(client: Any, secret: str, node: str, prefix: str = DEFAULT_PREFIX) -> NodeCredential:
    """Create or refresh ``node``'s ACL user on Redis (``client`` may run ``ACL``) and
    return its credential. Idempotent: the password derives from ``secret``, so a Redis
    restart is repaired by the agent's next exchange.

    Raises:
        ValueError: empty secret or bad node name.
    """
    password = node_password(secret, node)
    user = node_user(node)
    set_agent_user(client, user, password, node, prefix)
    return NodeCredential(node=node, username=user, password=password)


def exchange(
    reviewer: Reviewer,
    client: Any,
    token: str,
    *,
    secret: str,
    namespace: str,
    service_account: str,
    daemonset_prefix: str,
    prefix: str = DEFAULT_PREFIX,
) -> NodeCredential:
    """The whole exchange (module docstring): review ``token``, check its pod, issue.

    Raises:
        CredentialRefused: the token does not prove an agent pod of a node.
    """
    review = reviewer.review(token)
    extra = ((review.get("status") or {}).get("user") or {}).get("extra") or {}
    names = extra.get(POD_NAME_EXTRA) or []
    pod = reviewer.pod(namespace, names[0]) if len(names) == 1 else None
    node = node_of(review, pod, namespace, service_account, daemonset_prefix)
    return issue(client, secret, node, prefix)


class KubeReviewer:
    """:class:`Reviewer` through the Kubernetes API with the API pod's own service account
    (it needs ``create tokenreviews`` and ``get pods`` in the agents' namespace)."""

    def __init__(self) -> None:
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        try:
            k8s_config.load_incluster_config()
        except k8s_config.ConfigException:
            k8s_config.load_kube_config()
        self._k8s = k8s
        self._api = k8s.ApiClient()

    def review(self, token: str) -> dict[str, Any]:
        k8s = self._k8s
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token, audiences=[AUDIENCE]))
        out = k8s.AuthenticationV1Api(self._api).create_token_review(body)
        review: dict[str, Any] = self._api.sanitize_for_serialization(out)
        return review

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            out = self._k8s.CoreV1Api(self._api).read_namespaced_pod(name, namespace)
        except self._k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        pod: dict[str, Any] = self._api.sanitize_for_serialization(out)
        return pod
