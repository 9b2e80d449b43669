"""Every series the Grafana dashboard (templates/grafana/pasture.json) and the alerting
rules (roles/prometheus) query is one the exporter really exports.

Each query is parsed with promql-parser (the Prometheus grammar, not a regular
expression); every vector selector's metric name must be a series the API's collectors
emit over a real store (redis-server) holding a node with measured GPUs, a VC, a waiting
job and a scheduling cycle. Names outside pasture (``up``, node-exporter's) are listed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import pytest
import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "templates" / "grafana" / "pasture.json"
# series other exporters provide: Prometheus' own scrape health and node-exporter's
EXTERNAL = {"up", "node_filesystem_avail_bytes", "node_filesystem_size_bytes"}
# Grafana's built-in variables with a value PromQL accepts where they stand
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((.+),\s*\w+\)$")


def selectors(expr) -> list[str]:
    """The metric names of every vector selector in a parsed PromQL expression."""
    names: list[str] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, promql_parser.VectorSelector):
            names.append(e.name)
        elif isinstance(e, promql_parser.MatrixSelector):
            stack.append(e.vector_selector)
        elif isinstance(e, promql_parser.BinaryExpr):
            stack += [e.lhs, e.rhs]
        elif isinstance(e, promql_parser.Call):
            stack += list(e.args)
        elif isinstance(e, promql_parser.AggregateExpr):
            stack += [x for x in (e.expr, e.param) if x is not None]
        elif isinstance(
            e, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr
        ):
            stack.append(e.expr)
    return names


def grafana_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        m = LABEL_VALUES.match(var.get("query", "") if var["type"] == "query" else "")
        if m:
            out.append(m.group(1))
    for name, value in GRAFANA_VARS.items():
        out = [q.replace(name, value) for q in out]
    return out


def alert_queries() -> list[str]:
    import yaml

    from tests.roles.test_prometheus_rules import render

    rules = yaml.safe_load(render(prometheus_alert_pending_s_per_vc={"research": 600}))
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


@pytest.fixture()
def exported(redis_url, tmp_path) -> set[str]:
    """Sample names the API's registry (app.py's collectors) emits over a real store."""
    from scheduler.api.collectors import HealthCollector, SchedulerCollector
    from scheduler.api.metrics import Metrics
    from scheduler.services.status import StatusService
    from scheduler.settings import SchedulerSettings
    from scheduler.spec import parse_job_spec
    from scheduler.store import Store
    from scheduler.store.records import NodeRecord
    from tests.scheduler.api.test_health_metrics import self_signed

    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    settings = SchedulerSettings.model_validate(
        {"virtual_clusters": [{"name": "default", "guarantee": {"gpu": 1}}]}
    )
    store.apply_vcs(settings.virtual_clusters)
    store.register_node(NodeRecord(name="g", address="127.0.0.1", cpu_m=1000, memory=2**30, gpu=2))
    gpu = {"util_percent": 40, "memory_used": 2**30, "memory_total": 80 * 2**30}
    health = {"healthy": True, "temperature_c": 40, "power_w": 70, "ecc_uncorrected": 0}
    store.heartbeat(
        "g",
        {
            "cpu_percent": 12.5,
            "memory_used": 2**29,
            "memory_total": 2**30,
            "gpus": [{"index": i, **gpu} for i in (0, 1)],
            "gpu_health": [{"index": i, **health, "xids": []} for i in (0, 1)],
        },
    )
    store.set_node_state("g", "cordoned", "cordoned by the GPU health probe: test")
    store.create_job(parse_job_spec({"name": "j", "roles": {"r": {"command": "true"}}}))
    store.record_cycle(0.01)
    cert = tmp_path / "api.crt"
    self_signed(cert, days=30)
    metrics = Metrics(StatusService(store).status)
    metrics.requests.labels("GET", "/x", "200").inc()
    metrics.latency.labels("GET", "/x").observe(0.01)
    metrics.registry.register(SchedulerCollector(store))
    metrics.registry.register(HealthCollector(store, str(cert)))
    text = generate_latest(metrics.registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def check(queries: list[str], exported: set[str]) -> set[str]:
    used: set[str] = set()
    for q in queries:
        names = selectors(promql_parser.parse(q))
        assert names, f"no series named in {q!r}"
        assert all(names), f"a selector without a metric name in {q!r}"
        used.update(names)
    missing = sorted(n for n in used - exported if n not in EXTERNAL)
    assert not missing, f"queried but not exported: {missing}"
    return used


def test_every_grafana_query_names_an_exported_series(exported):
    used = check(grafana_queries(), exported)
    assert len(used) >= 15
    # the renamed families are gone from the dashboard, the per-GPU ones are in it
    assert not {"pasture_node_gpus", "pasture_vc_gpus", "pasture_node_utilisation_percent"} & used
    assert {"pasture_gpu_utilisation_ratio", "pasture_gpu_memory_used_bytes"} <= used
    ids = [p["id"] for p in json.loads(DASHBOARD.read_text())["panels"]]
    assert len(ids) == len(set(ids))


def test_every_alert_expression_names_an_exported_series(exported):
    used = check(alert_queries(), exported)
    assert "pasture_gpu_healthy" in used


def test_the_walker_finds_nested_selectors():
    q = (
        "histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) > 1 "
        "unless on (node) (b{x='1'} == 1) or -max_over_time(c[1h:5m]) or topk(3, d)"
    )
    assert sorted(selectors(promql_parser.parse(q))) == ["a_bucket", "b", "c", "d"]
