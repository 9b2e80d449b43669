"""Cluster routes: nodes, VCs, status, whoami."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from scheduler.api.auth import principal
from scheduler.api.responses import CONFLICT, FORBIDDEN, NOT_FOUND, errors
from scheduler.api.schemas import (
    ForgottenNodeOut,
    NodeEventsOut,
    NodeOut,
    StatusOut,
    VcOut,
    WhoAmI,
)
from scheduler.services.nodes import NodeService
from scheduler.services.status import StatusService
from scheduler.services.vcs import VcService
from scheduler.store.tokens import TokenInfo

router = APIRouter(prefix="/api/v1")


@router.get("/nodes", tags=["nodes"], response_model=list[NodeOut], responses=errors())
def list_nodes(request: Request, who: TokenInfo = Depends(principal)) -> list[dict[str, Any]]:
    """Every node with its state, capacity, allocated resources and last heartbeat."""
    nodes: NodeService = request.app.state.nodes
    return nodes.list(who)


@router.get(
    "/forgotten-nodes", tags=["nodes"], response_model=list[ForgottenNodeOut], responses=errors()
)
def forgotten_nodes(request: Request, who: TokenInfo = Depends(principal)) -> list[dict[str, Any]]:
    """Nodes pasture forgot (gone for good once their tasks were requeued, or deleted by
    an operator), oldest first: ``[{time, node, reason}]``, the newest 100 kept."""
    nodes: NodeService = request.app.state.nodes
    return nodes.forgotten(who)


@router.get(
    "/nodes/{name}/events",
    tags=["nodes"],
    response_model=NodeEventsOut,
    responses=errors(NOT_FOUND),
)
def node_events(name: str, request: Request, who: TokenInfo = Depends(principal)) -> dict[str, Any]:
    """A node's events, also once it is forgotten: ``{node, known, events, forgotten}``.
    404 when the node is neither known nor forgotten."""
    nodes: NodeService = request.app.state.nodes
    return nodes.events(who, name)


@router.get("/nodes/{name}", tags=["nodes"], response_model=NodeOut, responses=errors(NOT_FOUND))
def get_node(name: str, request: Request, who: TokenInfo = Depends(principal)) -> dict[str, Any]:
    """One node. 404 when unknown."""
    nodes: NodeService = request.app.state.nodes
    return nodes.get(who, name)


NodeAction = Literal["cordon", "uncordon", "drain"]
NODE_ACTIONS: tuple[NodeAction, ...] = ("cordon", "uncordon", "drain")
"""The node state changes an operator may ask for, one route each (``POST
/api/v1/nodes/NAME/cordon`` ...): an explicit path per action, so that another method on a
node's sub-resource (``POST .../events``) is a 405 and an unknown action a 404, as for any
other path the API does not have."""


def _node_action_route(action: NodeAction) -> Any:
    def node_action(
        name: str,
        request: Request,
        reason: str | None = Query(None, max_length=500, description="why (kept in the event)"),
        who: TokenInfo = Depends(principal),
    ) -> dict[str, Any]:
        nodes: NodeService = request.app.state.nodes
        return nodes.set_state(who, name, action, reason=reason)

    node_action.__name__ = f"node_{action}"
    return node_action


_NODE_ACTION_DOCS = {
    "cordon": "Cordon a node: no new tasks are placed on it; its running tasks stay.",
    "uncordon": "Uncordon a node: ready for new tasks again.",
    "drain": "Drain a node: cordon it and move its tasks off (their jobs are requeued).",
}

for _action in NODE_ACTIONS:
    router.add_api_route(
        f"/nodes/{{name}}/{_action}",
        _node_action_route(_action),
        methods=["POST"],
        tags=["nodes"],
        response_model=NodeOut,
        responses=errors(FORBIDDEN, NOT_FOUND),
        summary=f"{_action.capitalize()} a node",
        description=_NODE_ACTION_DOCS[_action]
        + " Leaves a node event (who, when, ``reason``, the jobs with tasks on the node);"
        " the answer lists those jobs in ``affected_jobs``. Admin or agent tokens only"
        " (403 for user tokens); 404 for an unknown node.",
    )


@router.delete(
    "/nodes/{name}",
    tags=["nodes"],
    response_model=NodeOut,
    responses=errors(FORBIDDEN, NOT_FOUND, CONFLICT),
)
def delete_node(
    name: str, request: Request, force: bool = False, who: TokenInfo = Depends(principal)
) -> dict[str, Any]:
    """Delete a node that is gone for good: lost now (its tasks requeued without charge),
    its record removed by the loop. Admin tokens only (403); 404 for an unknown node; 409
    while the node heartbeated within its fence bound (``force=true`` overrides: the
    operator knows the machine is gone)."""
    nodes: NodeService = request.app.state.nodes
    return nodes.delete(who, name, force=force)


@router.get("/vcs", tags=["vcs"], response_model=list[VcOut], responses=errors(FORBIDDEN))
def list_vcs(request: Request, who: TokenInfo = Depends(principal)) -> list[dict[str, Any]]:
    """Virtual clusters with guarantee, max, used and borrowed resources."""
    vcs: VcService = request.app.state.vcs
    return vcs.list(who)


@router.get("/status", tags=["cluster"], response_model=StatusOut, responses=errors())
def cluster_status(request: Request, who: TokenInfo = Depends(principal)) -> dict[str, Any]:
    """Cluster summary: nodes and jobs by state, capacity and allocation."""
    status: StatusService = request.app.state.status
    return status.status(who)


@router.get("/whoami", tags=["cluster"], response_model=WhoAmI, responses=errors())
def whoami(who: TokenInfo = Depends(principal)) -> dict[str, Any]:
    """The calling token's name, role, VCs and the VCs it operates (``pasture login``
    checks a token with it)."""
    return {
        "name": who.name,
        "role": who.role.value,
        "vcs": list(who.vcs),
        "operates": list(who.operates),
    }
