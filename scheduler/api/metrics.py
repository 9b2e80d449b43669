"""Prometheus metrics of the API (prometheus-client), one registry per app.

Exposed at ``/metrics`` (bearer token needed, any role):

- ``pasture_api_requests_total{method, route, status}``            counter
- ``pasture_api_request_duration_seconds{method, route}``          histogram, seconds
- ``pasture_jobs{state}``, ``pasture_nodes{state}``                 gauges read from the store
  at scrape time (from the cluster status summary).
- scheduler metrics (queue length per VC, pending reasons, cycle latency, placements,
  preemptions, GPUs per node and VC, heartbeat age, utilisation):
  :class:`scheduler.api.collectors.SchedulerCollector`
  and docs/dashboard.md.
- operations health for the alerting rules (store up, node state / cordon reason, per-GPU
  health, oldest pending job per VC, API certificate expiry):
  :class:`scheduler.api.collectors.HealthCollector` and
  docs/operations.md.

What one caller sees of job-labelled series: :mod:`scheduler.api.visibility`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.api.collectors import ClusterCollector
from scheduler.api.visibility import VisibleMetrics

if TYPE_CHECKING:
    from scheduler.store.tokens import TokenInfo


class Metrics:
    """The app's registry and request metrics."""

    def __init__(self, status: Callable[[], dict[str, Any]] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "pasture_api_requests",
            "API requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "pasture_api_request_duration_seconds",
            "API request latency in seconds (streams: until the headers are sent).",
            ["method", "route"],
            registry=self.registry,
        )
        if status is not None:
            self.registry.register(ClusterCollector(status))

    def visible_to(self, principal: TokenInfo) -> VisibleMetrics:
        """What ``/metrics`` answers ``principal`` (see :class:`VisibleMetrics`)."""
        return VisibleMetrics(self.registry, principal.may_use_vc)


class MetricsMiddleware:
    """Counts requests by their route template (``/api/v1/jobs/{name}``), not raw path."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                route = scope.get("route")
                template = getattr(route, "path", None) or "unmatched"
                self.metrics.requests.labels(scope["method"], template, str(status[0])).inc()
                self.metrics.latency.labels(scope["method"], template).observe(
                    time.perf_counter() - start
                )
            await send(message)

        await self.app(scope, receive, record)
