"""Node taints and the pod tolerations that match them: the one parser of
``key[=value]:Effect`` strings, shared by the aks stack (agent and device plugin
DaemonSets) and the kubernetes executor (task pods).

    "nvidia.com/gpu=present:NoSchedule" -> {key, operator: Equal, value, effect}
    "dedicated:NoExecute"               -> {key, operator: Exists, effect}

Tolerations are returned in the Kubernetes wire form (camelCase keys are the same as the
snake_case ones here), usable as a pulumi-kubernetes input and as
``kubernetes.client.V1Toleration(**toleration)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NotRequired, TypedDict

# AKS taints every node of a Spot pool with this (it cannot be removed), see
# https://learn.microsoft.com/azure/aks/spot-node-pool
SPOT_TAINT = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TAINT = re.compile(r"^(?P<key>[\w./-]+)(=(?P<value>[\w.-]*))?:(?P<effect>\w+)$")


class Toleration(TypedDict):
    """A pod toleration as the Kubernetes API spells it (``V1Toleration``'s fields)."""

    key: str
    operator: str
    value: NotRequired[str]
    effect: str


def toleration(taint: str) -> Toleration:
    """The toleration of one taint: ``key=value:Effect`` -> operator ``Equal``,
    ``key:Effect`` -> operator ``Exists``.

    Raises:
        ValueError: ``taint`` is not ``key[=value]:Effect`` with an effect in
            :data:`EFFECTS` (the message quotes it).
    """
    match = _TAINT.match(taint)
    if not match or match["effect"] not in EFFECTS:
        raise ValueError(
            f"expected a taint 'key[=value]:Effect' with Effect one of {', '.join(EFFECTS)}, "
            f"got {taint!r}"
        )
    if match["value"] is None:
        return {"key": match["key"], "operator": "Exists", "effect": match["effect"]}
    return {
        "key": match["key"],
        "operator": "Equal",
        "value": match["value"],
        "effect": match["effect"],
    }


def tolerations(taints: Iterable[str]) -> list[Toleration]:
    """Tolerations of ``taints`` in order, duplicates dropped. Raises ValueError as
    :func:`toleration`."""
    return [toleration(t) for t in dict.fromkeys(taints)]


def pool_taints(taints: Iterable[str], *, spot: bool) -> tuple[str, ...]:
    """The taints a node pool's nodes carry: its configured ones plus, for a Spot pool,
    the taint AKS adds (:data:`SPOT_TAINT`)."""
    out = dict.fromkeys(taints)
    if spot:
        out[SPOT_TAINT] = None
    return tuple(out)
