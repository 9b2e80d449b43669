"""Monitoring of an aks cluster (config ``monitoring``, default on):

    DaemonSet dcgm-exporter-<pool>  NVIDIA's DCGM exporter on each GPU node of the pool
                                    (``dcgmExporterImage``): per-GPU utilisation, memory,
                                    temperature, power, XID errors on :9400/metrics. It
                                    sees every GPU of its node (NVIDIA_VISIBLE_DEVICES=all
                                    with the NVIDIA runtime of AKS GPU nodes) and requests
                                    none, so it takes no GPU from a task.
    helm Release pasture-monitoring kube-prometheus-stack (``prometheusChartVersion``, the
                                    prometheus-community chart): Prometheus, Alertmanager,
                                    node exporter; scrapes the pasture API's /metrics
                                    (bearer token from Secret ``pasture-metrics-token``)
                                    and the DCGM exporters; pasture's alert rules, rendered
                                    from the one rules file of the Ansible role
                                    (roles/prometheus/templates/pasture-alerts.yml.j2) with
                                    the role's default thresholds and :data:`AKS_RULES`
                                    (the chart's node-exporter job, the share's volume
                                    claim, the DCGM-based GPU rules).
    Secret pasture-metrics-token    the token Prometheus sends (empty until the operator
                                    sets it: docs/platforms.md; Pulumi leaves its data alone)

Not run on Azure here (no account on the build machine): the objects are checked under
Pulumi mocks with kubernetes-validate; the chart's values against the chart's documented
keys only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pulumi
import pulumi_kubernetes as k8s
import yaml

from scheduler.k8s.taints import pool_taints, tolerations
from stacks.aks.common import SHARE_CLAIM, Workloads, app_labels, pool_affinity
from stacks.config import GpuPool, StackConfig

DCGM_NAME = "dcgm-exporter"
DCGM_PORT = 9400
METRICS_TOKEN_SECRET = "pasture-metrics-token"
CHART = "kube-prometheus-stack"
CHART_REPO = "https://prometheus-community.github.io/helm-charts"
ROLE = Path(__file__).resolve().parents[2] / "roles" / "prometheus"
ALERTS_TEMPLATE = ROLE / "templates" / "pasture-alerts.yml.j2"
DCGM_RESOURCES = {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}


NODE_EXPORTER_JOB = "node-exporter"
"""The job label of kube-prometheus-stack's node exporters: the chart's values give the
prometheus-node-exporter pods the label ``jobLabel: node-exporter`` and its ServiceMonitor
``jobLabel: jobLabel`` (charts/kube-prometheus-stack/values.yaml, prometheus-community/
helm-charts)."""
DCGM_JOB = "dcgm"
"""The job name of the DCGM exporters' scrape config (:func:`prometheus_values`)."""
AKS_RULES: dict[str, Any] = {
    "prometheus_node_exporter_job": NODE_EXPORTER_JOB,
    "prometheus_alert_share_claim": SHARE_CLAIM,
    "prometheus_alert_dcgm": True,
    "prometheus_alert_dcgm_job": DCGM_JOB,
}
"""Role variables that fit pasture's rules to the series an AKS cluster has: the chart's
node-exporter job, the share as a volume claim (the node exporter leaves kubelet mounts
out), and the DCGM-based GPU rules (the agent pod has no NVML)."""


def alert_rules(**overrides: Any) -> dict[str, Any]:
    """pasture's alert rule groups (``{"groups": [...]}``), rendered from the Ansible
    role's template with the role's defaults (one definition of the rules everywhere),
    and ``overrides`` of role variables (:data:`AKS_RULES` for the aks stack). Rendered
    as Ansible's template module does (``trim_blocks``).

    Raises:
        jinja2.TemplateError, yaml.YAMLError: the template or defaults do not render.
    """
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()) or {}
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined, autoescape=False)
    plain = {k: v for k, v in defaults.items() if not (isinstance(v, str) and "{{" in v)}
    for key, value in defaults.items():  # values that are themselves Jinja (defaults of
        if key not in plain:  # other roles): rendered with their own default() fallback
            plain[key] = env.from_string(value).render(**plain)
    source = ALERTS_TEMPLATE.read_text()
    template = jinja2.Environment(
        variable_start_string="[[",
        variable_end_string="]]",
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
    ).from_string(source.split("\n", 1)[1])  # the first line is Ansible's jinja2 header
    rendered = template.render(
        **{**plain, **overrides}, ansible_managed="pasture alerting rules (aks)"
    )
    rules: dict[str, Any] = yaml.safe_load(rendered)
    return rules


def dcgm_exporter_daemonset(w: Workloads, cfg: StackConfig, pool: GpuPool) -> k8s.apps.v1.DaemonSet:
    """DaemonSet ``dcgm-exporter-<pool>`` of ``dcgmExporterImage`` on the pool's nodes."""
    labels = {**app_labels(DCGM_NAME), "pasture/pool": pool.name}
    taints = (*pool_taints(pool.taints, spot=pool.spot), "nvidia.com/gpu:NoSchedule")
    container = {
        "name": DCGM_NAME,
        "image": cfg.dcgm_exporter_image,
        "env": [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},  # every GPU, none requested
            {"name": "DCGM_EXPORTER_LISTEN", "value": f":{DCGM_PORT}"},
            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},  # pod labels on metrics
        ],
        # a host port: the node's agent (host network, no NVML in its pod) reads its own
        # node's GPUs here (scheduler/agent/gpu_dcgm.py) and cordons the node on a fault
        "ports": [{"name": "metrics", "container_port": DCGM_PORT, "host_port": DCGM_PORT}],
        "security_context": {"capabilities": {"add": ["SYS_ADMIN"]}},  # profiling metrics
        "resources": DCGM_RESOURCES,
        "liveness_probe": {
            "http_get": {"path": "/health", "port": DCGM_PORT},
            "initial_delay_seconds": 60,
            "period_seconds": 30,
        },
        "volume_mounts": [
            {"name": "pod-resources", "mount_path": "/var/lib/kubelet/pod-resources"}
        ],
    }
    return k8s.apps.v1.DaemonSet(
        f"{w.prefix}-dcgm-exporter-{pool.name}",
        metadata=w.meta(f"{DCGM_NAME}-{pool.name}"),
        spec={
            "selector": {"match_labels": labels},
            "update_strategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "affinity": pool_affinity(pool),
                    "tolerations": tolerations(taints),
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "pod-resources",
                            "host_path": {"path": "/var/lib/kubelet/pod-resources"},
                        }
                    ],
                },
            },
        },
        opts=w.opts,
    )


MANAGED_CONTROL_PLANE: dict[str, Any] = {
    "kubeScheduler": {"enabled": False},
    "kubeControllerManager": {"enabled": False},
    "kubeEtcd": {"enabled": False},
    "defaultRules": {
        "rules": {
            "kubeSchedulerAlerting": False,
            "kubeSchedulerRecording": False,
            "kubeControllerManager": False,
            "etcd": False,
        }
    },
}
"""Chart values that turn off what a managed (AKS) control plane does not expose."""


def alertmanager_config(cfg: StackConfig) -> dict[str, Any]:
    """``alertmanager.config`` values: every alert to the first of ``alertReceivers``
    (the chart's ``null`` receiver kept for its Watchdog route); {} when none is set (the
    chart's default: alerts only shown in Alertmanager)."""
    if not cfg.alert_receivers:
        return {}
    first = cfg.alert_receivers[0]["name"]
    return {
        "config": {
            "route": {
                "receiver": first,
                "group_by": ["alertname", "namespace", "node"],
                "group_wait": "30s",
                "group_interval": "5m",
                "repeat_interval": "4h",
                "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}],
            },
            "receivers": [{"name": "null"}, *cfg.alert_receivers],
        }
    }


def prometheus_values(cfg: StackConfig, namespace: str, api_service: str) -> dict[str, Any]:
    """Values of the kube-prometheus-stack chart: scrape configs for the pasture API and
    the DCGM exporters, pasture's rules, requests for Prometheus and Alertmanager."""
    token = f"/etc/prometheus/secrets/{METRICS_TOKEN_SECRET}/token"
    scrape = [
        {
            "job_name": "pasture",
            "metrics_path": "/metrics",
            "authorization": {"type": "Bearer", "credentials_file": token},
            "static_configs": [
                {
                    "targets": [f"{api_service}.{namespace}.svc:{cfg.api_port}"],
                    "labels": {"cluster": cfg.cluster_name},
                }
            ],
        },
        {
            "job_name": DCGM_JOB,
            "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
            "relabel_configs": [
                {
                    "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                    "regex": DCGM_NAME,
                    "action": "keep",
                },
                {
                    "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                    "regex": str(DCGM_PORT),
                    "action": "keep",
                },
                {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
            ],
        },
    ]
    return {
        "grafana": {"enabled": False},
        "prometheus": {
            "prometheusSpec": {
                "additionalScrapeConfigs": scrape,
                "secrets": [METRICS_TOKEN_SECRET],
                "retention": "15d",
                "resources": {"requests": {"cpu": "200m", "memory": "1Gi"}},
                "nodeSelector": {"kubernetes.azure.com/mode": "system"},
            }
        },
        "alertmanager": {
            "alertmanagerSpec": {
                "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}},
                "nodeSelector": {"kubernetes.azure.com/mode": "system"},
            },
            **alertmanager_config(cfg),
        },
        # AKS runs the control plane: kube-scheduler, kube-controller-manager and etcd
        # cannot be scraped, so their "Down" alerts would fire for good
        **MANAGED_CONTROL_PLANE,
        # a node label on the node exporters' targets, as on the Ansible clusters
        "prometheus-node-exporter": {
            "prometheus": {
                "monitor": {
                    "relabelings": [
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                            "targetLabel": "node",
                            "action": "replace",
                        }
                    ]
                }
            }
        },
        "additionalPrometheusRulesMap": {"pasture": alert_rules(**AKS_RULES)},
    }


def monitoring(w: Workloads, cfg: StackConfig, api_service: str) -> k8s.helm.v3.Release | None:
    """Everything of the module docstring; None when ``monitoring`` is false."""
    if not cfg.monitoring:
        return None
    for pool in cfg.gpu_pools:
        dcgm_exporter_daemonset(w, cfg, pool)
    k8s.core.v1.Secret(
        f"{w.prefix}-metrics-token",
        metadata=w.meta(METRICS_TOKEN_SECRET),
        string_data={"token": ""},
        # the operator puts the token in (docs/platforms.md); updates keep it
        opts=pulumi.ResourceOptions.merge(
            w.opts, pulumi.ResourceOptions(ignore_changes=["stringData", "data"])
        ),
    )
    return k8s.helm.v3.Release(
        f"{w.prefix}-monitoring",
        name="pasture-monitoring",
        chart=CHART,
        version=cfg.prometheus_chart_version,
        repository_opts={"repo": CHART_REPO},
        namespace=w.namespace,
        values=prometheus_values(cfg, w.namespace, api_service),
        opts=w.opts,
    )
