"""Prometheus metrics of the API (prometheus-client), one registry per app.

Exposed at ``/metrics`` (bearer token needed, any role):

- ``pasture_api_requests_total{method, route, status}``            counter
- ``pasture_api_request_duration_seconds{method, route}``          histogram, seconds
- ``pasture_jobs{state}``, ``pasture_nodes{state}``                 gauges read from the store
  at scrape time (from the cluster status summary).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


class ClusterCollector:
    """Collects job and node counts by state from ``status()`` at each scrape."""

    def __init__(self, status: Callable[[], dict]) -> None:
        self._status = status

    def collect(self):
        try:
            status = self._status()
        except Exception:  # a scrape must not fail because Redis blinked
            log.exception("cluster status for /metrics failed")
            return
        for key, name, doc in (
            ("jobs", "pasture_jobs", "Jobs by state."),
            ("nodes", "pasture_nodes", "Nodes by state."),
        ):
            counts = status.get(key)
            if isinstance(counts, dict):
                family = GaugeMetricFamily(name, doc, labels=["state"])
                for state, n in sorted(counts.items()):
                    if isinstance(n, int | float):
                        family.add_metric([str(state)], n)
                yield family


class Metrics:
    """The app's registry and request metrics."""

    def __init__(self, status: Callable[[], dict] | None = None) -> None:
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
