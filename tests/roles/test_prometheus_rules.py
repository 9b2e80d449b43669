"""The alerting rules of roles/prometheus: `promtool check rules` on the rendered template
(role defaults, and with per-VC thresholds), `promtool test rules` of every alert
(roles/prometheus/tests/pasture-alerts_test.yml), and every pasture metric the rules use
is one the API really exports. promtool comes with Debian's `prometheus` package
(scripts/install-system-deps.sh); without it the promtool tests skip."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import redis
import yaml
from prometheus_client import generate_latest

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "prometheus"
TEMPLATE = ROLE / "templates" / "pasture-alerts.yml.j2"
UNIT_TESTS = ROLE / "tests" / "pasture-alerts_test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (apt prometheus)")


def render(**overrides) -> str:
    """The rules as Ansible renders them: the template's ``#jinja2:`` header delimiters,
    trim_blocks, the role defaults (plain values) plus ``overrides``."""
    header, body = TEMPLATE.read_text().split("\n", 1)
    opts = dict(re.findall(r"(\w+):'([^']*)'", header))
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, **opts)
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values["prometheus_alert_share_mountpoint"] = "/srv/pasture/share"
    values.update(overrides)
    return env.from_string(body).render(**values)


def promtool(*args: str, cwd: Path) -> str:
    r = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def alert_names(text: str) -> set[str]:
    return {r["alert"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]}


@needs_promtool
@pytest.mark.parametrize(
    "overrides", [{}, {"prometheus_alert_pending_s_per_vc": {"a": 60, "b": 7200}}]
)
def test_promtool_check_rules(tmp_path, overrides):
    (tmp_path / "rules.yml").write_text(render(**overrides))
    out = promtool("check", "rules", "rules.yml", cwd=tmp_path)
    assert f"SUCCESS: {len(alert_names(render()))} rules found" in out


@needs_promtool
def test_promtool_unit_tests_of_every_alert(tmp_path):
    (tmp_path / "pasture-alerts.yml").write_text(
        render(prometheus_alert_pending_s_per_vc={"research": 600})
    )
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    assert "SUCCESS" in promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)


def test_every_alert_has_a_unit_test_and_a_doc():
    names = alert_names(render())
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    tested = {
        t["alertname"]
        for group in tests
        for t in group["alert_rule_test"]
        if t.get("exp_alerts")  # a test that sees it fire
    }
    assert names == tested
    doc = (REPO / "docs" / "operations.md").read_text()
    assert [n for n in sorted(names) if f"`{n}`" not in doc] == []


def test_rules_use_only_metrics_the_api_exports(redis_url, tmp_path):
    """Scrape the API's collectors over a real store (a node with GPU health, a waiting
    job) and check that every pasture_* series in the rules is exported."""
    exported = exported_pasture_metrics(redis_url, tmp_path)
    exprs = " ".join(r["expr"] for g in yaml.safe_load(render())["groups"] for r in g["rules"])
    used = set(re.findall(r"\b(pasture_[a-z_]+)\b", exprs))
    assert used, "the rules name no pasture metric?"
    assert sorted(used - exported) == []


def exported_pasture_metrics(redis_url: str, tmp_path: Path) -> set[str]:
    """Names of the pasture_* series the API's /metrics collectors export over a real
    store with a node (GPU health, cordoned), a waiting job and a cycle recorded."""
    from scheduler.api.collectors import HealthCollector, SchedulerCollector
    from scheduler.api.metrics import Metrics
    from scheduler.spec import parse_job_spec
    from scheduler.store import Store
    from scheduler.store.records import NodeRecord

    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    store.register_node(NodeRecord(name="n", address="127.0.0.1", cpu_m=1000, memory=2**30))
    store.heartbeat(
        "n",
        {
            "gpu_health": [
                {
                    "index": 0,
                    "healthy": True,
                    "temperature_c": 40,
                    "power_w": 70,
                    "ecc_uncorrected": 0,
                    "xids": [],
                }
            ]
        },
    )
    store.set_node_state("n", "cordoned", "cordoned by the GPU health probe: test")
    store.create_job(parse_job_spec({"name": "j", "roles": {"r": {"command": "true"}}}))
    store.record_cycle(0.01)
    cert = tmp_path / "api.crt"
    from tests.scheduler.api.test_health_metrics import self_signed

    self_signed(cert, days=30)
    metrics = Metrics(lambda: {"jobs": {}, "nodes": {}})
    metrics.requests.labels("GET", "/x", "200").inc()
    metrics.registry.register(SchedulerCollector(store))
    metrics.registry.register(HealthCollector(store, str(cert)))
    return set(re.findall(r"^(pasture_\w+)", generate_latest(metrics.registry).decode(), re.M))
