"""Node capacity from the Kubernetes node object (agents of the aks platform).

An agent in a Kubernetes pod sees neither its node's GPUs (the NVIDIA device plugin gives
devices only to pods that request them; the agent requests none) nor, through cgroups,
a useful CPU/memory figure. The node object is the truth: what the kubelet offers to pods.

    PASTURE_K8S_NODE_NAME (downward API spec.nodeName, set by the aks agent DaemonSet)
      --GET /api/v1/nodes/<name> (service account token, httpx)--> node JSON
      --node_capacity()--> Capacity(cpu_m = allocatable cpu, memory = allocatable memory,
                                    gpu = allocatable nvidia.com/gpu,
                                    gpu_model = label nvidia.com/gpu.product,
                                                else label pasture/gpu-model)

A GPU node (label ``kubernetes.azure.com/accelerator=nvidia``, or a GPU product label)
whose device plugin has not yet advertised ``nvidia.com/gpu`` is read again until it has
(``wait_s``), so that an agent starting beside the plugin on a fresh node does not
register 0 GPUs. The service account needs ``get`` on ``nodes`` (a ClusterRole; the aks
stack creates it).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from scheduler.spec.quantity import parse_cpu, parse_memory


@dataclass(frozen=True)
class Capacity:
    """Node capacity: cpu_m millicores, memory bytes, gpu devices, gpu_model name."""

    cpu_m: int
    memory: int
    gpu: int
    gpu_model: str | None


NODE_ENV = "PASTURE_K8S_NODE_NAME"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # NVIDIA GPU feature discovery
GPU_MODEL_LABEL = "pasture/gpu-model"  # the aks stack's pool label (config gpu_model)
ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"  # AKS: "nvidia" on GPU VM sizes
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
log = logging.getLogger(__name__)


class NodeCapacityError(RuntimeError):
    """The node object could not be read or lacks allocatable cpu/memory (the message
    names the node and the cause)."""


def node_capacity(node: Mapping[str, Any]) -> Capacity:
    """Capacity of a node object (``GET /api/v1/nodes/<name>`` JSON).

    Args:
        node: the node, with ``status.allocatable`` (``cpu`` like ``"23660m"``, ``memory``
            like ``"214603576Ki"``, optional ``nvidia.com/gpu`` like ``"1"``) and
            ``metadata.labels``.

    Returns:
        ``Capacity(cpu_m millicores, memory bytes, gpu devices, gpu_model)``; gpu_model is
        None when the node has no allocatable GPU.

    Raises:
        NodeCapacityError: allocatable cpu or memory missing or not a quantity.
    """
    name = (node.get("metadata") or {}).get("name", "?")
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    try:
        cpu_m = parse_cpu(allocatable["cpu"])
        memory = parse_memory(allocatable["memory"])
        gpu = int(allocatable.get(GPU_RESOURCE, "0"))
    except (KeyError, ValueError) as exc:
        raise NodeCapacityError(
            f"node {name}: expected status.allocatable with cpu and memory quantities, "
            f"got {dict(allocatable)!r} ({exc})"
        ) from None
    model = labels.get(GPU_PRODUCT_LABEL) or labels.get(GPU_MODEL_LABEL) if gpu else None
    return Capacity(cpu_m=cpu_m, memory=memory, gpu=gpu, gpu_model=model)


def expects_gpus(node: Mapping[str, Any]) -> bool:
    """Whether the node is a GPU node by its labels (AKS accelerator label or a GPU
    product label), whatever its allocatable says yet."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(ACCELERATOR_LABEL) == "nvidia" or GPU_PRODUCT_LABEL in labels


def _get_node(
    name: str,
    *,
    server: str | None,
    token_file: Path,
    ca_file: Path,
    timeout_s: float,
) -> httpx.Response:
    """``GET /api/v1/nodes/<name>`` with the pod's service account; the raw response.

    Raises:
        NodeCapacityError: not in a cluster, no token, or the request failed.
    """
    if server is None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise NodeCapacityError(
                f"node {name}: {NODE_ENV} is set but KUBERNETES_SERVICE_HOST is not "
                "(not running in a Kubernetes pod)"
            )
        server = f"https://{host}:{port}"
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise NodeCapacityError(
            f"node {name}: cannot read the service account token {token_file}: {exc.strerror}"
        ) from None
    verify: Any = str(ca_file) if ca_file.exists() else True
    try:
        return httpx.get(
            f"{server}/api/v1/nodes/{name}",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            verify=verify,
            timeout=timeout_s,
        )
    except httpx.HTTPError as exc:
        raise NodeCapacityError(f"node {name}: GET {server}/api/v1/nodes: {exc}") from None


def _refused(name: str, response: httpx.Response) -> NodeCapacityError:
    if response.status_code == 403:
        return NodeCapacityError(
            f"node {name}: 403 Forbidden: the service account needs 'get' on "
            "'nodes' (ClusterRole; the aks stack creates <namespace>-agent-nodes and "
            "<namespace>-scheduler-nodes)"
        )
    return NodeCapacityError(
        f"node {name}: GET /api/v1/nodes/{name} answered {response.status_code}: "
        f"{response.text[:200]}"
    )


def fetch_node(
    name: str,
    *,
    server: str | None = None,
    token_file: Path = SERVICE_ACCOUNT / "token",
    ca_file: Path = SERVICE_ACCOUNT / "ca.crt",
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """``GET /api/v1/nodes/<name>`` with the pod's service account (in-cluster).

    Args:
        name: node name.
        server: API server URL; default ``https://$KUBERNETES_SERVICE_HOST:$..._PORT``.
        token_file / ca_file: the service account's token and the cluster CA.
        timeout_s: HTTP timeout in seconds.

    Raises:
        NodeCapacityError: not in a cluster, the request failed, or the API answered an
            error (403 names the missing RBAC rule).
    """
    response = _get_node(
        name, server=server, token_file=token_file, ca_file=ca_file, timeout_s=timeout_s
    )
    if response.status_code != 200:
        raise _refused(name, response)
    node: dict[str, Any] = response.json()
    return node


def nodes_gone(
    names: Iterable[str],
    *,
    server: str | None = None,
    token_file: Path = SERVICE_ACCOUNT / "token",
    ca_file: Path = SERVICE_ACCOUNT / "ca.crt",
    timeout_s: float = 5.0,
) -> set[str]:
    """The names among ``names`` whose Kubernetes Node object no longer exists (the API
    answers 404): the cloud removed the machine (a Spot eviction with policy Delete, an
    autoscaler scale-down). The loop's :class:`scheduler.rules.health.NodeHealth` asks this about
    silent nodes only. Arguments as :func:`fetch_node`.

    Raises:
        NodeCapacityError: a request failed or was refused (the caller then assumes
            nothing is gone).
    """
    gone = set()
    for name in names:
        response = _get_node(
            name, server=server, token_file=token_file, ca_file=ca_file, timeout_s=timeout_s
        )
        if response.status_code == 404:
            gone.add(name)
        elif response.status_code != 200:
            raise _refused(name, response)
    return gone


def gone_probe(env: Mapping[str, str] | None = None) -> Callable[[Iterable[str]], set[str]] | None:
    """:func:`nodes_gone` when this process runs in a Kubernetes pod (``KUBERNETES_SERVICE_HOST``
    set and a service account token mounted: the loop on the aks platform), else None."""
    env = os.environ if env is None else env
    if env.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT / "token").exists():
        return nodes_gone
    return None


def read_capacity(
    name: str,
    *,
    wait_s: float = 300.0,
    interval_s: float = 5.0,
    fetch: Callable[[str], Mapping[str, Any]] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Capacity:
    """The capacity of node ``name``, waiting up to ``wait_s`` seconds (every
    ``interval_s``) for a GPU node's device plugin to advertise its GPUs. ``fetch``
    reads the node object (default :func:`fetch_node`).

    Returns the last reading when the wait runs out (a GPU node whose plugin never
    started registers 0 GPUs: the scheduler then places no GPU task there).

    Raises:
        NodeCapacityError: as :func:`fetch_node` / :func:`node_capacity`.
    """
    fetch = fetch or fetch_node
    deadline = clock() + wait_s
    while True:
        node = fetch(name)
        cap = node_capacity(node)
        if cap.gpu or not expects_gpus(node) or clock() >= deadline:
            return cap
        sleep(interval_s)


def capacity_from_env(env: Mapping[str, str] | None = None) -> Capacity | None:
    """The node object's capacity when ``PASTURE_K8S_NODE_NAME`` is set (agent in a
    Kubernetes pod), else None (the agent detects with psutil / NVML).

    Raises:
        NodeCapacityError: the variable is set but the node cannot be read.
    """
    name = (os.environ if env is None else env).get(NODE_ENV)
    return read_capacity(name) if name else None


class CapacityWatch:
    """Re-reads the node object now and then, and says when its capacity changed (the
    device plugin advertised more or fewer GPUs, a GPU went away, the kubelet's reserved
    resources changed), so that the agent registers the node again with what it now
    offers instead of keeping the figure read at start.

    Args:
        name: the node's name.
        interval_s: seconds between two readings (at most one API request per interval).
        fetch: reads the node object (default :func:`fetch_node`).
        clock: monotonic clock (s).
    """

    def __init__(
        self,
        name: str,
        interval_s: float = 60.0,
        fetch: Callable[[str], Mapping[str, Any]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self._fetch = fetch or fetch_node
        self._clock = clock
        self._last: Capacity | None = None
        self._read_at: float | None = None

    def changed(self) -> bool:
        """True when a reading due now differs from the previous one (the first reading
        only remembers). A failed reading is logged and counts as no change."""
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self.interval_s:
            return False
        self._read_at = now
        try:
            cap = node_capacity(self._fetch(self.name))
        except NodeCapacityError as exc:
            log.warning("cannot re-read the node's capacity: %s", exc)
            return False
        before, self._last = self._last, cap
        return before is not None and cap != before


def capacity_watch_from_env(env: Mapping[str, str] | None = None) -> CapacityWatch | None:
    """A :class:`CapacityWatch` of this agent's node when ``PASTURE_K8S_NODE_NAME`` is set
    (agent in a Kubernetes pod), else None."""
    name = (os.environ if env is None else env).get(NODE_ENV)
    return CapacityWatch(name) if name else None
