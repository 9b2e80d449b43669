"""The FastAPI application factory."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import redis
from fastapi import Depends, FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from scheduler.api.auth import TokenCache, principal
from scheduler.api.collectors import HealthCollector, SchedulerCollector
from scheduler.api.dashboard import router as dashboard_router
from scheduler.api.dashboard.sessions import SessionStore
from scheduler.api.fairness import TimeBudget, TokenGate
from scheduler.api.limits import BodySizeLimit
from scheduler.api.metrics import Metrics, MetricsMiddleware
from scheduler.api.ratelimit import AuthFailureLimiter, TokenRateLimiter
from scheduler.api.refusals import EarlyRefusal, RefusalHold, digest
from scheduler.api.responses import INVALID, UNAVAILABLE, errors
from scheduler.api.routers import admin, batch, cluster, jobs, nodecred, schedules, usage
from scheduler.api.schemas import Health
from scheduler.api.strict import no_unknown_query
from scheduler.services import backend
from scheduler.services.accounting import AccountingService
from scheduler.services.dryrun import DryRunService
from scheduler.services.errors import InvalidSpecError, ServiceError
from scheduler.services.jobs import JobService, validation_errors
from scheduler.services.jobusage import JobUsageService
from scheduler.services.logs import LogService
from scheduler.services.nodes import NodeService
from scheduler.services.status import StatusService
from scheduler.services.tokens import TokenService
from scheduler.services.usage import UsageService
from scheduler.services.vcs import VcService
from scheduler.settings import ApiSettings, parse_limit
from scheduler.store.tokens import TokenInfo, TokenStore

log = logging.getLogger(__name__)


def create_app(
    settings: Any,
    store: Any | None = None,
    tokens: TokenStore | None = None,
) -> FastAPI:
    """Build the API app.

    Args:
        settings: the master's settings (``scheduler.settings``); reads ``cluster_name``,
            ``share_dir``, ``api.max_body_bytes`` and, when ``store``/``tokens`` are None,
            ``redis``.
        store: the backend store; None opens one from ``settings.redis``.
        tokens: the token store; None uses the store's Redis client (``store.r``) or a
            new client from the settings, with the token lifetimes of ``settings.api``.

    Returns:
        A FastAPI app; the OpenAPI document at ``/openapi.json`` (any valid token). No
        ``/docs`` page: Swagger UI would load its scripts from a CDN, and a browser
        cannot send the bearer token it needs (docs/api.md says how to view the document).
    """
    client = None
    if store is None or tokens is None:
        client = getattr(store, "r", None) or backend.redis_client(settings)
    if store is None:
        store = backend.open_store(settings, client)
    api_settings: ApiSettings = getattr(settings, "api", None) or ApiSettings()
    if tokens is None:
        tokens = TokenStore.from_settings(client, api_settings)
    max_body = api_settings.max_body_bytes
    share_dir = Path(getattr(settings, "share_dir", ".") or ".")

    app = FastAPI(
        title="pasture scheduler API",
        version="1",
        description="Jobs, nodes, virtual clusters and status of a pasture cluster. "
        "Every endpoint but /healthz needs 'Authorization: Bearer <token>'.",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    status_service = StatusService(store, getattr(settings, "cluster_name", ""))
    app.state.store = store
    app.state.tokens = tokens
    app.state.jobs = JobService(store, secrets_key_file=getattr(settings, "secrets_key_file", None))
    app.state.dry_run = DryRunService(
        app.state.jobs,
        getattr(getattr(settings, "loop", None), "policy", "pasture"),
        share=share_dir if getattr(settings, "share_dir", None) else None,
    )
    app.state.nodes = NodeService(store)
    app.state.vcs = VcService(store)
    app.state.status = status_service
    app.state.logs = LogService(share_dir)
    app.state.token_service = TokenService(tokens)
    app.state.usage = UsageService(store)
    app.state.job_usage = JobUsageService(store, app.state.jobs)
    app.state.accounting = AccountingService(store)
    # the dashboard's sessions live next to the store's keys (its pages use services only)
    app.state.dashboard_sessions = SessionStore(
        getattr(store, "r", None) or client or backend.redis_client(settings),
        tokens,
        getattr(store, "p", "pasture:"),
    )
    app.state.token_cache = TokenCache(api_settings.token_cache_s)
    app.state.auth_limiter = AuthFailureLimiter(
        api_settings.auth_failures_per_window,
        api_settings.auth_failure_window_s,
        per_address=api_settings.auth_failures_per_address,
    )
    app.state.token_limiter = TokenRateLimiter.from_settings(api_settings)
    # one token's dashboard requests handled at a time (scheduler/api/fairness.py)
    app.state.token_gate = TokenGate(api_settings.token_concurrency)
    # a refused client's next requests answer 429 before anything is read (refusals.py)
    app.state.refusals = RefusalHold(api_settings.refusal_hold_s)
    known_sessions: dict[str, str] = {}  # the dashboard's sessions seen valid (pages.py)
    app.state.dashboard_known_sessions = known_sessions

    def known(bearer: str | None, sid: str | None) -> bool:
        if bearer is not None:
            cache: TokenCache = app.state.token_cache
            return cache.knows(bearer)
        return sid is not None and digest(sid) in known_sessions

    # ... and at most api.token_time_limit seconds of their handler time (fairness.py)
    app.state.time_budget = TimeBudget(
        parse_limit(api_settings.token_time_limit, "api.token_time_limit")
    )
    app.state.metrics = Metrics(status_service.status)
    app.state.metrics.registry.register(SchedulerCollector(store))
    app.state.metrics.registry.register(  # issue 19: what the alerting rules need
        HealthCollector(store, api_settings.tls_cert)
    )

    strict = [Depends(no_unknown_query)]
    app.include_router(jobs.router, dependencies=strict)
    app.include_router(batch.router, dependencies=strict)  # POST /api/v1/jobs:batch
    app.include_router(schedules.router, dependencies=strict)  # scheduled jobs
    app.include_router(cluster.router, dependencies=strict)
    app.include_router(usage.router, dependencies=strict)
    app.include_router(admin.router, dependencies=strict)
    app.include_router(dashboard_router)
    app.state.node_credentials = nodecred.issuer(  # Kubernetes agents' own Redis users
        api_settings.node_credentials, getattr(store, "r", None)
    )
    app.include_router(nodecred.router, dependencies=strict)

    @app.get("/openapi.json", tags=["cluster"], include_in_schema=False, dependencies=strict)
    def openapi(who: TokenInfo = Depends(principal)) -> JSONResponse:
        """The OpenAPI document (any valid token)."""
        return JSONResponse(app.openapi())

    @app.get(
        "/healthz",
        tags=["cluster"],
        response_model=Health,
        responses={**UNAVAILABLE, **INVALID},
        dependencies=strict,
    )
    def healthz() -> dict[str, Any] | JSONResponse:
        """Liveness without a token: ``{"status": "ok"}`` (200), or 503 when Redis does not
        answer."""
        try:
            tokens.ping()
        except Exception as exc:
            return JSONResponse({"status": "unavailable", "detail": str(exc)}, status_code=503)
        return {"status": "ok"}

    @app.get(
        "/metrics",
        tags=["cluster"],
        response_class=Response,
        responses=errors(),
        dependencies=strict,
    )
    def metrics(who: TokenInfo = Depends(principal)) -> Response:
        """Prometheus metrics (text exposition format); any valid token. Series labelled
        with a job name it may not see come without the job (scheduler/api/visibility.py)."""
        data = generate_latest(app.state.metrics.visible_to(who))
        return Response(data, media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        if isinstance(exc, InvalidSpecError):
            return JSONResponse({"detail": exc.errors, "message": exc.message}, status_code=422)
        return JSONResponse({"detail": exc.message}, status_code=exc.status)

    @app.exception_handler(redis.ConnectionError)
    @app.exception_handler(redis.TimeoutError)
    async def store_unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.warning("Redis unavailable: %s", exc)
        return JSONResponse(
            {"detail": f"the cluster store (Redis) is unavailable: {exc}"},
            status_code=503,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(ValidationError)
    async def pydantic_error(request: Request, exc: ValidationError) -> JSONResponse:
        errors = validation_errors(exc)
        return JSONResponse({"detail": errors, "message": "invalid input"}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        # Starlette's Allow names only the methods of the one route that matched the path;
        # a path served by several routes (GET and POST /api/v1/jobs) allows all of theirs.
        allowed: set[str] = set()
        for route in app.router.routes:
            if route.matches(request.scope)[0] is not Match.NONE:
                allowed |= getattr(route, "methods", None) or set()
        headers = {**(exc.headers or {}), "Allow": ", ".join(sorted(allowed))}
        return JSONResponse({"detail": exc.detail}, status_code=405, headers=headers)

    @app.exception_handler(RecursionError)
    @app.exception_handler(OverflowError)
    async def input_too_deep(request: Request, exc: Exception) -> JSONResponse:
        # A backstop: the routes map these to 400/422 where they can arise; one that
        # escapes is still the input's fault, and is logged so that the route gets fixed.
        log.warning("unmapped %s on %s", type(exc).__name__, request.url.path)
        return JSONResponse(
            {"detail": f"the request could not be processed: {type(exc).__name__}"},
            status_code=400,
        )

    @app.exception_handler(RequestValidationError)
    async def request_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": e["msg"], "type": e["type"]}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": errors, "message": "invalid request"}, status_code=422)

    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(BodySizeLimit, max_body_bytes=max_body)
    requests = app.state.metrics.requests
    app.add_middleware(  # outermost: a held request costs a header scan
        EarlyRefusal,
        hold=app.state.refusals,
        known=known,
        refused=lambda method: requests.labels(method, "held", "429").inc(),
    )
    return app
