"""ClusterOutputs: what every stack exports (contract 1).

The schema is :class:`scheduler.inventory.ClusterOutputs` (the installed CLI renders the
inventory without this directory); this module adds the Pulumi side: turning outputs of
resources into one validated value and exporting its fields as stack outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi

from scheduler.inventory import (
    CONTRACT_KEYS,
    ClusterOutputs,
    HostOutput,
    NodeOutput,
    parse_stack_output,
)

__all__ = [
    "CONTRACT_KEYS",
    "ClusterOutputs",
    "HostOutput",
    "NodeOutput",
    "cluster_outputs",
    "export_cluster_outputs",
    "parse_stack_output",
]


def cluster_outputs(
    build: Callable[..., ClusterOutputs], *inputs: Any
) -> pulumi.Output[dict[str, Any]]:
    """Resolve ``inputs`` and validate what ``build(*resolved)`` returns.

    Args:
        build: returns a :class:`ClusterOutputs` from the resolved input values.
        inputs: Pulumi inputs/outputs (addresses, public IPs...).

    Returns:
        An output of the contract fields as plain JSON-able values. A value that breaks the
        contract fails the deployment with the pydantic message naming the field.
    """
    return pulumi.Output.all(*inputs).apply(lambda vals: build(*vals).to_stack_outputs())


def export_cluster_outputs(outputs: pulumi.Output[dict[str, Any]]) -> None:
    """Export each contract field as a top-level stack output (``pulumi stack output
    --json`` then prints exactly what :func:`parse_stack_output` reads)."""
    for key in CONTRACT_KEYS:
        pulumi.export(key, outputs.apply(lambda d, k=key: d[k]))
