"""Unknown query parameters answer 422 instead of being ignored.

A misspelt filter (``/api/v1/jobs?stat=running``) would otherwise return every job as if
it had been applied. Applied to the API's routers (not the dashboard's forms).
"""

from __future__ import annotations

from fastapi import HTTPException, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute


def _query_names(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _known(route: APIRoute) -> frozenset[str]:
    cached = getattr(route, "_pasture_query_names", None)
    if cached is None:
        cached = frozenset(_query_names(route.dependant))
        vars(route)["_pasture_query_names"] = cached
    return cached


async def no_unknown_query(request: Request) -> None:
    """Raise 422 naming the first query parameter the route does not declare.

    Async (it does no I/O): a plain ``def`` dependency would cost every request a hop to
    a worker thread."""
    route = request.scope.get("route")
    if route is None or not hasattr(route, "dependant"):
        return
    known = _known(route)
    for name in request.query_params:
        if name not in known:
            expected = ", ".join(sorted(known)) or "none"
            raise HTTPException(
                422,
                [
                    {
                        "loc": ["query", name[:64]],
                        "msg": f"unknown query parameter; expected one of: {expected}",
                        "type": "extra_forbidden",
                    }
                ],
            )
