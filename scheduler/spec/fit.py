"""Reject at submit a gang that no node of the cluster could ever hold.

Only the static shape of the cluster counts (each node's capacity, labels, GPU model; not
what is free now, and lost nodes are ignored): a task fits a node when its request fits in
the node's capacity and the node passes the core's own static filters
(:data:`scheduler.core.plugins.FILTERS` ``gpu-model`` and ``node-selector``, so submit and
placement never disagree: a role with ``gpu_model`` needs a node of that model even when it
asks for no GPU; an ``entrypoint`` role selects :data:`ENTRYPOINT_LABEL`, which only
container and kubernetes executor nodes carry). The gang's minimum (the core's
``Job.gang_request()``: ``min_available`` of every role) must also fit in the whole
cluster's capacity.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.model import Node, NodeState
from scheduler.core.plugins import FILTERS
from scheduler.core.resources import Resources
from scheduler.spec.model import ENTRYPOINT_LABEL, EXECUTOR_LABEL, JobSpec
from scheduler.units import format_bytes, format_millicores


def _describe(r: Resources) -> str:
    return f"cpu {format_millicores(r.cpu_m)}, memory {format_bytes(r.memory)}, gpu {r.gpu}"


def unfittable_reason(spec: JobSpec, nodes: Iterable[Node]) -> str | None:
    """None when the gang could fit the cluster when empty, else one sentence saying why not.

    Args:
        spec: the validated job.
        nodes: the cluster's nodes (capacity in millicores / bytes / devices).
    Returns:
        e.g. "role worker: a task needs cpu 64, memory 1Gi, gpu 0; the largest node
        (node-1) has cpu 8, memory 16Gi, gpu 0".
    """
    usable = [n for n in nodes if n.state != NodeState.LOST]
    if not usable:
        return "the cluster has no nodes (none registered or all lost)"
    total = Resources()
    for n in usable:
        total = total + n.capacity
    static = [FILTERS["gpu-model"].check, FILTERS["node-selector"].check]
    core_job = spec.to_core()
    core_roles = {r.name: r for r in core_job.roles}
    for name, role in spec.roles.items():
        req = role.resources.to_core()
        model = role.resources.gpu_model
        core_role = core_roles[name]
        candidates = [
            n
            for n in usable
            if all(
                check(n, (n.capacity.cpu_m, n.capacity.memory, n.capacity.gpu), core_role)
                for check in static
            )
        ]
        if not candidates:
            if role.entrypoint and not any(
                n.labels.get(ENTRYPOINT_LABEL) == "true" for n in usable
            ):
                kinds = sorted({n.labels.get(EXECUTOR_LABEL, "") for n in usable} - {""})
                have = (
                    f"this cluster's nodes use the {' and '.join(kinds)} executor"
                    if kinds
                    else f"no node of this cluster carries the label {ENTRYPOINT_LABEL}"
                )
                return (
                    f"role {name} runs its image's ENTRYPOINT (no command), which only nodes "
                    f"with the container or kubernetes executor can do; {have}: give the "
                    "role a command"
                )
            what = []
            if role.node_selector:
                what.append(f"labels {dict(role.node_selector)}")
            if model:
                what.append(f"GPU model {model}")
            return f"role {name}: no node has {' and '.join(what)}"
        if not any(req.fits_in(n.capacity) for n in candidates):
            biggest = max(
                candidates, key=lambda n: (n.capacity.gpu, n.capacity.cpu_m, n.capacity.memory)
            )
            return (
                f"role {name}: a task needs {_describe(req)}; the largest matching node "
                f"({biggest.name}) has {_describe(biggest.capacity)}"
            )
    gang = core_job.gang_request()  # the core's own minimum gang, so the two agree
    if not gang.fits_in(total):
        return (
            f"the gang needs {_describe(gang)} in total; the whole cluster has {_describe(total)}"
        )
    return None
