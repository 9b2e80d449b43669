"""The alert rules the aks stack installs (issue 35, item 10), rendered by the Pulumi
program under mocks, checked against the series an AKS cluster with the stack's
kube-prometheus-stack and dcgm-exporter really has: every selector of every rule names a
metric that exists on AKS, under a job that has it. On main four rules could never fire
there (``up{job="node"}``, the share's mountpoint, and GPU rules fed by an NVML the agent
pod does not have).

Where the AKS series names come from (each cited where it is listed below):
- pasture's own: the API's /metrics collectors over a real store
  (tests/roles/test_prometheus_rules.py ``exported_pasture_metrics``);
- kube-prometheus-stack (prometheus-community/helm-charts,
  charts/kube-prometheus-stack/values.yaml): the node exporters' pods carry
  ``jobLabel: node-exporter`` and their ServiceMonitor ``jobLabel: jobLabel``, so their
  job is ``node-exporter``; their filesystem collector excludes
  ``^/(dev|proc|sys|var/lib/docker/.+|var/lib/kubelet/.+)($|/)``, where Azure Files
  volumes are mounted, so no node_filesystem series shows the share; the kubelet job
  (``kubelet``) exports ``kubelet_volume_stats_available_bytes`` /
  ``_capacity_bytes`` per ``persistentvolumeclaim`` (the chart's own
  KubePersistentVolumeFillingUp rule reads them);
- NVIDIA dcgm-exporter, ``etc/default-counters.csv`` (NVIDIA/dcgm-exporter): the fields
  listed there without ``#``, scraped by the stack's ``dcgm`` job;
- ``up`` for every job Prometheus scrapes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from scheduler.agent.gpu_dcgm import DCGM_URL_ENV
from scheduler.xid import CRITICAL_XIDS
from stacks.aks.agents import ADDRESS_ENV
from stacks.aks.common import SHARE_CLAIM
from stacks.aks.monitoring import DCGM_PORT
from tests.roles.test_prometheus_rules import exported_pasture_metrics
from tests.stacks.mocks import build_stack

pytestmark = pytest.mark.stacks

REPO = Path(__file__).resolve().parents[2]
AKS_UNIT_TESTS = REPO / "roles" / "prometheus" / "tests" / "pasture-alerts-aks_test.yml"
PROMTOOL = shutil.which("promtool")
SECRETS = {"redisPassword": "redis-password-0123456789abcdef"}
POOLS = [
    {
        "name": "a100",
        "vm_size": "Standard_NC24ads_A100_v4",
        "min_count": 0,
        "max_count": 4,
        "count": 0,
    }
]

# NVIDIA/dcgm-exporter etc/default-counters.csv: every field not commented out
DCGM_DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
}
# kube-prometheus-stack's jobs and what pasture's rules may read of them
CHART_SERIES = {
    "node-exporter": {"up"},  # node_* too, but no filesystem of the share (see above)
    "kubelet": {
        "up",
        "kubelet_volume_stats_available_bytes",
        "kubelet_volume_stats_capacity_bytes",
    },
}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
PROMQL_WORDS |= {"and", "or", "unless", "offset", "inf", "nan"}


@pytest.fixture(scope="module")
def built():
    return build_stack({"platform": "aks", "gpuPools": POOLS}, SECRETS)


@pytest.fixture(scope="module")
def aks_values(built):
    (release,) = built.of_type("kubernetes:helm.sh/v3:Release")
    return release.inputs["values"]


def test_each_agent_reads_its_nodes_dcgm_exporter(built):
    """The path from DCGM to a cordon: the exporter listens on a host port of its node,
    and the node's agent (host network, no NVML) is told to read it there
    (scheduler/agent/gpu_dcgm.py; tests/scheduler/agent/test_gpu_dcgm.py cordons)."""
    dcgm = built.named("pasture-dcgm-exporter-a100").inputs["spec"]["template"]["spec"]
    (port,) = dcgm["containers"][0]["ports"]
    assert port["hostPort"] == port["containerPort"] == DCGM_PORT
    agent = built.named("pasture-agent-a100").inputs["spec"]["template"]["spec"]
    assert agent["hostNetwork"] is True
    env = agent["containers"][0]["env"]
    names = [e["name"] for e in env]
    url = next(e["value"] for e in env if e["name"] == DCGM_URL_ENV)
    assert url == f"http://$({ADDRESS_ENV}):{DCGM_PORT}/metrics"
    assert names.index(ADDRESS_ENV) < names.index(DCGM_URL_ENV)  # $(VAR) expands only then
    bare = build_stack({"platform": "aks", "gpuPools": POOLS, "monitoring": "false"}, SECRETS)
    env = bare.named("pasture-agent-a100").inputs["spec"]["template"]["spec"]["containers"][0]
    assert DCGM_URL_ENV not in [e["name"] for e in env["env"]]


@pytest.fixture()
def aks_series(tmp_path, redis_url):
    pasture = exported_pasture_metrics(redis_url, tmp_path)
    return {"pasture": pasture | {"up"}, "dcgm": DCGM_DEFAULT_COUNTERS | {"up"}, **CHART_SERIES}


def selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """``[(metric name, {label: matcher})]`` of every vector selector of a PromQL ``expr``
    (functions, aggregations, keywords and grouping label lists left out)."""
    text = re.sub(r"#[^\n]*", "", expr)  # comments
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    out = []
    for m in re.finditer(r"(?<![\w.$])([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?(\s*\()?", text):
        name, labels, call = m.group(1), m.group(2), m.group(3)
        if call or name.lower() in PROMQL_WORDS:
            continue
        pairs = dict(re.findall(r'(\w+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"', labels or ""))
        jobs = re.findall(r'job\s*=\s*"([^"]*)"', labels or "")
        out.append((name, {**pairs, **({"job": jobs[0]} if jobs else {})}))
    return out


def test_the_selector_reader_reads_promql():
    expr = (
        "histogram_quantile(0.99, sum by (le) (rate(pasture_x_bucket[10m]))) > 1 "
        'unless on (node) up{job="node-exporter",node!=""} == 0 or vector(1) and time() - 3e2'
    )
    assert selectors(expr) == [
        ("pasture_x_bucket", {}),
        ("up", {"job": "node-exporter", "node": ""}),
    ]


def test_every_aks_rule_reads_series_that_exist_on_aks(aks_values, aks_series):
    rules = [
        r
        for g in aks_values["additionalPrometheusRulesMap"]["pasture"]["groups"]
        for r in g["rules"]
    ]
    wrong = []
    for rule in rules:
        for name, labels in selectors(rule["expr"]):
            job = labels.get("job")
            jobs = [job] if job else [j for j, names in aks_series.items() if name in names]
            if not jobs or any(name not in aks_series.get(j, set()) for j in jobs):
                wrong.append((rule["alert"], name, job))
    assert wrong == []
    assert len(rules) >= 20  # 16 of every platform, 4 DCGM ones
    by_name = {r["alert"]: r for r in rules}
    # the node exporters' targets get the node label the rule selects on
    relabel = aks_values["prometheus-node-exporter"]["prometheus"]["monitor"]["relabelings"]
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node",
        "action": "replace",
    } in relabel
    assert 'job="node-exporter"' in by_name["PastureNodeExporterDown"]["expr"]
    assert f'persistentvolumeclaim="{SHARE_CLAIM}"' in by_name["PastureShareFilling"]["expr"]
    # the DCGM-based GPU rules replace what the agent's NVML showed elsewhere
    assert {
        "PastureGpuXidError",
        "PastureGpuMemoryErrors",
        "PastureGpuMissing",
        "PastureDcgmExporterDown",
    } <= set(by_name)
    xids = {int(x) for x in re.findall(r"== (\d+)", by_name["PastureGpuXidError"]["expr"])}
    assert xids == set(CRITICAL_XIDS)


def test_the_role_default_xids_are_the_agents():
    defaults = yaml.safe_load((REPO / "roles/prometheus/defaults/main.yml").read_text())
    assert defaults["prometheus_alert_critical_xids"] == sorted(CRITICAL_XIDS)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (apt prometheus)")
def test_promtool_checks_and_unit_tests_the_aks_rules(aks_values, tmp_path):
    """promtool accepts the AKS rule set, and each AKS-only rule fires on the series
    AKS has (roles/prometheus/tests/pasture-alerts-aks_test.yml)."""
    rules = aks_values["additionalPrometheusRulesMap"]["pasture"]
    (tmp_path / "pasture-alerts-aks.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copy(AKS_UNIT_TESTS, tmp_path / AKS_UNIT_TESTS.name)
    for args in (
        ("check", "rules", "pasture-alerts-aks.yml"),
        ("test", "rules", AKS_UNIT_TESTS.name),
    ):
        r = subprocess.run(
            [PROMTOOL, *args], capture_output=True, text=True, cwd=tmp_path, timeout=60
        )
        assert r.returncode == 0, r.stdout + r.stderr
