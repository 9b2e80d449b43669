"""``POST /api/v1/node-credentials``: a Kubernetes agent's pod-bound ServiceAccount token
in, its node's own Redis user out (:mod:`scheduler.nodecred`; enabled by
``api.node_credentials``, 404 otherwise). No API token: the ServiceAccount token is the
proof. A refused token counts as a failed authentication of the client's address (429
after too many, as for API tokens)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Request, status
from pydantic import BaseModel, ConfigDict, Field

from scheduler.api.auth import failed, refuse_if_address_blocked, refuse_if_blocked
from scheduler.api.responses import BAD_JSON, INVALID, TOO_LARGE, TOO_MANY, UNAVAILABLE, _r
from scheduler.nodecred import CredentialRefused, KubeReviewer, NodeCredential, exchange

router = APIRouter(prefix="/api/v1")

Issuer = Callable[[str], NodeCredential]


class CredentialIn(BaseModel):
    """The agent's projected ServiceAccount token (audience ``pasture-node-credentials``)."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=16384)


class CredentialOut(BaseModel):
    """The node's Redis ACL user (``node-<node>``) and its password."""

    node: str
    username: str
    password: str


def issuer(settings: Any, client: Any, reviewer: Any = None) -> Issuer | None:
    """The exchange bound to ``settings`` (an ``api.node_credentials`` section, None: off)
    and the API's admin Redis ``client``; the Kubernetes client is made at first use."""
    if settings is None:
        return None
    lock = threading.Lock()
    made: dict[str, Any] = {"reviewer": reviewer}

    def run(token: str) -> NodeCredential:
        with lock:
            if made["reviewer"] is None:
                made["reviewer"] = KubeReviewer()
        return exchange(
            made["reviewer"],
            client,
            token,
            secret=settings.secret_file.read_text().strip(),
            namespace=settings.namespace,
            service_account=settings.service_account,
            daemonset_prefix=settings.daemonset_prefix,
        )

    return run


@router.post(
    "/node-credentials",
    tags=["nodes"],
    response_model=CredentialOut,
    responses={
        **BAD_JSON,
        **TOO_LARGE,
        **TOO_MANY,
        **UNAVAILABLE,
        **INVALID,
        403: _r("the token does not prove an agent pod of a node (detail says which check)"),
        404: _r("node credentials are not enabled (api.node_credentials)"),
    },
)
def node_credentials(body: CredentialIn, request: Request) -> dict[str, Any]:
    """Exchange an agent pod's token for its node's Redis credential (module docstring)."""
    run: Issuer | None = getattr(request.app.state, "node_credentials", None)
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "node credentials are not enabled")
    refuse_if_blocked(request, body.token)
    refuse_if_address_blocked(request)
    try:
        cred = run(body.token)
    except CredentialRefused as exc:
        failed(request, body.token)
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"token refused: {exc}") from None
    return {"node": cred.node, "username": cred.username, "password": cred.password}
