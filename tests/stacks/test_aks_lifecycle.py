"""The aks stack's autoscaling, upgrade and monitoring objects under Pulumi mocks, checked
with kubernetes-validate (tests/k8s_manifests.py) and against the scheduler code that
reads them (the autoscaler's pools, the liveness probes' module)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from scheduler.k8s.autoscale import (
    PLACEHOLDER_PRIORITY,
    POOLS_ENV,
    PRIORITY_CLASS,
    pools_from_env,
)
from stacks.aks.agents import AGENT_PRIORITY_CLASS, HOLD_LOCK, LOCK_FILE
from stacks.aks.monitoring import AKS_RULES, METRICS_TOKEN_SECRET, alert_rules
from stacks.aks.names import node_resource_group_name
from stacks.aks.redis import redis_probe, sentinel_probe
from stacks.aks.scheduler import api_liveness_command
from stacks.config import ConfigError, parse_config
from tests.k8s_manifests import manifest, validate
from tests.stacks.mocks import build_stack

pytestmark = pytest.mark.stacks

PRIORITY = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
SECRETS = {"redisPassword": "redis-password-0123456789abcdef"}
LONGEST = "training-cluster-0123456789abcde"  # 32 characters, the longest accepted
POOLS = [
    {
        "name": "a100",
        "vm_size": "Standard_NC24ads_A100_v4",
        "min_count": 0,
        "max_count": 4,
        "count": 0,
        "spot": True,
        "cpu": 23,
        "memory_mib": 204800,
        "gpu_count": 1,
        "gpu_model": "A100",
    }
]


@pytest.fixture(scope="module")
def built():
    return build_stack(
        {
            "platform": "aks",
            "clusterName": LONGEST,
            "location": "australiasoutheast",
            "kubernetesVersion": "1.30",
            "gpuPools": POOLS,
        },
        SECRETS,
    )


def inputs(built, name):
    return built.named(name).inputs


def containers(built):
    """Every long-running container of the stack's workloads: (object, container)."""
    out = []
    for r in built.mocks.resources:
        if r.typ.split(":")[-1] in ("Deployment", "DaemonSet", "StatefulSet"):
            for c in r.inputs["spec"]["template"]["spec"]["containers"]:
                out.append((r.name, c))
    return out


def test_the_node_resource_group_is_explicit_and_fits(built):
    (cluster,) = built.of_type("azure-native:containerservice:ManagedCluster")
    nrg = cluster.inputs["nodeResourceGroup"]
    scope = "00000000-0000-0000-0000-000000000001/pasture/test"
    assert nrg == node_resource_group_name(LONGEST, scope, "australiasoutheast")
    assert len(nrg) <= 80 and cluster.inputs["kubernetesVersion"] == "1.30"


def test_the_loop_knows_the_pools_and_may_manage_placeholders(built):
    dep = inputs(built, f"{LONGEST}-scheduler")["spec"]["template"]["spec"]
    loop = next(c for c in dep["containers"] if c["name"] == "loop")
    env = {e["name"]: e["value"] for e in loop["env"]}
    (pool,) = pools_from_env(env)
    # the VM size goes out as such; the loop offers only what AKS leaves allocatable
    sent = json.loads(env[POOLS_ENV])[0]
    assert (sent["vm_cpu"], sent["vm_memory"]) == (23, 204800 * 2**20)
    assert (pool.name, pool.gpu, pool.max_count) == ("a100", 1, 4)
    assert 22000 < pool.cpu_m < 23000 and 180 * 2**30 < pool.memory < 204800 * 2**20
    assert "kubernetes.azure.com/scalesetpriority=spot:NoSchedule" in pool.taints
    assert pool.labels["pasture/pool"] == "a100"
    assert json.loads(env[POOLS_ENV])[0]["gpu_model"] == "A100"
    role = inputs(built, f"{LONGEST}-scheduler-role")
    assert set(role["rules"][0]["verbs"]) >= {"create", "list", "delete"}
    assert {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]} in role["rules"]
    nodes = inputs(built, f"{LONGEST}-scheduler-nodes")
    assert nodes["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    ]
    pc = inputs(built, f"{LONGEST}-placeholder-priority")
    assert pc["metadata"]["name"] == PRIORITY_CLASS
    assert pc["value"] == PLACEHOLDER_PRIORITY < 0 and pc["preemptionPolicy"] == "Never"


def test_every_long_running_container_has_requests_and_a_liveness_probe(built):
    seen = set()
    for owner, c in containers(built):
        seen.add(c["name"])
        assert c.get("resources", {}).get("requests"), f"{owner}/{c['name']} has no requests"
        assert c.get("livenessProbe"), f"{owner}/{c['name']} has no liveness probe"
    assert {"api", "loop", "agent", "nvidia-device-plugin", "dcgm-exporter", "redis"} <= seen


def test_agent_upgrades_surge_and_hand_over_through_a_node_lock(built):
    ds = inputs(built, f"{LONGEST}-agent-a100")["spec"]
    assert ds["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    (agent,) = ds["template"]["spec"]["containers"]
    assert HOLD_LOCK in agent["command"][-1]
    probe = agent["livenessProbe"]["exec"]["command"]
    assert probe[:4] == ["python3", "-m", "scheduler.agent.k8s_probe", "lease"]


def test_the_node_lock_makes_the_new_agent_wait_for_the_old_one(tmp_path):
    """The start script's lock, run by real shells: the surge pod's agent starts only once
    the old agent's process (holding fd 9 across its exec) has exited."""
    lock = HOLD_LOCK.replace(LOCK_FILE, str(tmp_path / "agent.lock"))
    old = subprocess.Popen(["/bin/sh", "-c", f"{lock} && exec sleep 30"])
    try:
        time.sleep(0.5)
        new = subprocess.Popen(
            ["/bin/sh", "-c", f"{lock} && exec echo started"],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)
        assert new.poll() is None  # waiting for the lock
        old.terminate()  # SIGTERM: the old agent exits
        out, _ = new.communicate(timeout=10)
        assert out.strip() == "started"
    finally:
        old.kill()
        old.wait()


def test_no_disruption_budget_blocks_an_upgrade_and_pools_surge_and_drain(built):
    """Issue 35 item 8: ``pasture-tasks`` (``maxUnavailable: 0``) made AKS refuse upgrades
    (UnsatisfiablePDB). No budget selects task pods; each GPU pool carries AKS upgrade
    settings (surge, drain timeout); Redis' budget lets one pod of three go."""
    task_pod = {"app.kubernetes.io/managed-by": "pasture", "pasture/job": "j1"}
    for pdb in built.of_type("kubernetes:policy/v1:PodDisruptionBudget"):
        spec = pdb.inputs["spec"]
        sel = spec["selector"]
        assert not all(task_pod.get(k) == v for k, v in sel.get("matchLabels", {}).items()), (
            pdb.name
        )
        assert spec.get("maxUnavailable") != 0 and "minAvailable" not in spec
    (pool,) = built.of_type("azure-native:containerservice:AgentPool")
    assert pool.inputs["upgradeSettings"] == {"maxSurge": "1", "drainTimeoutInMinutes": 30}


def test_no_gpu_pool_gives_no_task_budget_nor_agent_priority():
    bare = build_stack({"platform": "aks", "gpuPools": [], "monitoring": "false"}, SECRETS)
    (pdb,) = bare.of_type("kubernetes:policy/v1:PodDisruptionBudget")
    assert pdb.inputs["metadata"]["name"] == "pasture-redis"
    classes = {r.inputs["metadata"]["name"] for r in bare.of_type(PRIORITY)}
    assert AGENT_PRIORITY_CLASS not in classes


def test_upgrade_settings_are_validated_naming_the_key():
    pool = {**POOLS[0], "upgrade_max_surge": "0"}
    with pytest.raises(ConfigError, match=r"pasture:gpuPools\[0\]\.upgrade_max_surge"):
        parse_config({"platform": "aks", "gpuPools": [pool]})
    pool = {**POOLS[0], "upgrade_max_surge": "33%", "upgrade_drain_timeout_min": 90}
    (p,) = parse_config({"platform": "aks", "gpuPools": [pool]}).gpu_pools
    assert (p.upgrade_max_surge, p.upgrade_drain_timeout_min) == ("33%", 90)


def test_gpu_pools_deploy_independently_of_the_workloads(built):
    """Issue 35 item 9: the Kubernetes provider depended on every GPU pool, so one pool's
    quota error deployed no workload at all."""
    options = built.monitor.options
    pool_urns = {o["urn"] for o in options.values() if o["type"].endswith(":AgentPool")}
    assert pool_urns
    (provider,) = [o for o in options.values() if o["type"] == "pulumi:providers:kubernetes"]
    assert not pool_urns & set(provider["dependencies"])
    cluster_urn = next(o["urn"] for o in options.values() if o["type"].endswith(":ManagedCluster"))
    for name, o in options.items():
        if o["type"].startswith("kubernetes:"):
            assert not pool_urns & set(o["dependencies"]), name
    assert cluster_urn  # the provider reaches the cluster through its kubeconfig


def test_redis_pods_have_requests_probes_a_node_each_and_a_budget(built):
    """Issue 35 item 11: two of three Redis pods could share a node (no sentinel
    majority when it goes); no requests, no probes, no budget."""
    sts = inputs(built, f"{LONGEST}-redis")["spec"]
    pod = sts["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == sts["selector"]["matchLabels"]
    for c in [*pod["containers"], *pod["initContainers"]]:
        assert c["resources"]["requests"], c["name"]
        assert c["readinessProbe"]["exec"]["command"], c["name"]
        assert c["livenessProbe"]["exec"]["command"], c["name"]
    pdb = inputs(built, f"{LONGEST}-redis-pdb")["spec"]
    assert pdb == {"maxUnavailable": 1, "selector": {"matchLabels": sts["selector"]["matchLabels"]}}


def test_config_asks_for_a_system_node_per_redis_pod():
    with pytest.raises(ConfigError, match=r"^pasture:systemPool: expected count >= 3"):
        parse_config({"platform": "aks", "systemPool": {"count": 2}})
    assert parse_config({"platform": "aks"}).system_pool.count == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_probe(command: list[str], env: dict[str, str] | None = None) -> int:
    return subprocess.run(command, env=env, timeout=30, check=False).returncode


def test_redis_probes_against_a_real_redis_server(tmp_path):
    """The probe commands the pods run, against a real redis-server: ready and alive when
    it answers, failing with the wrong password (ready) or when it is gone."""
    port = _free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--requirepass",
            "pw",
            "--save",
            "",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    env = {"PATH": os.environ["PATH"], "REDIS_PASSWORD": "pw"}
    try:
        deadline = time.monotonic() + 10
        while _run_probe(redis_probe(port, live=False), env) != 0:
            assert time.monotonic() < deadline, "redis-server did not become ready"
            time.sleep(0.1)
        assert _run_probe(redis_probe(port, live=True), env) == 0
        wrong = {**env, "REDIS_PASSWORD": "nope"}
        assert _run_probe(redis_probe(port, live=False), wrong) != 0
        # a sentinel-like anonymous PING on a server without a password
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert _run_probe(redis_probe(port, live=True), env) != 0
    assert _run_probe(sentinel_probe(port), env) != 0
    anon = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while _run_probe(sentinel_probe(port), env) != 0:
            assert time.monotonic() < deadline, "redis-server did not answer PING"
            time.sleep(0.1)
    finally:
        anon.terminate()
        anon.wait(timeout=10)


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(503)  # what /healthz answers while Redis is away
        self.end_headers()
        self.wfile.write(b'{"status": "unavailable"}')

    def log_message(self, *args: object) -> None:
        pass


def test_api_liveness_is_not_tied_to_redis(built):
    """Issue 35 item 11: ``/healthz`` (503 while Redis is away) as the liveness probe
    restarted the API during a Redis outage. The probe now passes on any HTTP answer and
    fails only when the API does not answer."""
    dep = inputs(built, f"{LONGEST}-scheduler")["spec"]["template"]["spec"]
    api = next(c for c in dep["containers"] if c["name"] == "api")
    assert api["livenessProbe"]["exec"]["command"] == api_liveness_command(8443)
    server = http.server.HTTPServer(("127.0.0.1", 0), _Unavailable)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert _run_probe(api_liveness_command(port)) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert _run_probe(api_liveness_command(port)) != 0  # nothing answers: restart


def test_agent_surge_pods_outrank_tasks(built):
    """Issue 35 item 11: an agent surge pod could not fit on a full node (rollout stalled);
    its PriorityClass is above task pods (0) and placeholders, below system-critical."""
    ds = inputs(built, f"{LONGEST}-agent-a100")["spec"]["template"]["spec"]
    assert ds["priorityClassName"] == AGENT_PRIORITY_CLASS
    pc = inputs(built, f"{LONGEST}-agent-priority")
    assert pc["metadata"]["name"] == AGENT_PRIORITY_CLASS
    assert 0 < pc["value"] < 2_000_000_000 and pc["value"] > PLACEHOLDER_PRIORITY
    assert pc["preemptionPolicy"] == "PreemptLowerPriority" and not pc["globalDefault"]


def test_monitoring_scrapes_pasture_and_the_gpus_with_pasture_rules(built):
    (release,) = built.of_type("kubernetes:helm.sh/v3:Release")
    assert release.inputs["chart"] == "kube-prometheus-stack"
    assert release.inputs["repositoryOpts"]["repo"].startswith("https://prometheus-community")
    values = release.inputs["values"]
    spec = values["prometheus"]["prometheusSpec"]
    jobs = {s["job_name"]: s for s in spec["additionalScrapeConfigs"]}
    assert jobs["pasture"]["static_configs"][0]["targets"] == ["pasture-api.pasture.svc:8443"]
    assert jobs["pasture"]["authorization"]["credentials_file"].endswith(
        f"{METRICS_TOKEN_SECRET}/token"
    )
    assert spec["secrets"] == [METRICS_TOKEN_SECRET]
    rules = values["additionalPrometheusRulesMap"]["pasture"]
    assert rules == alert_rules(**AKS_RULES)
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"PastureApiDown", "PastureSchedulingLoopStalled"} <= names
    dcgm = inputs(built, f"{LONGEST}-dcgm-exporter-a100")["spec"]["template"]["spec"]
    (c,) = dcgm["containers"]
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])  # takes no GPU from tasks
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]


def test_every_object_of_this_variant_is_valid(built):
    objects = [
        manifest(r)
        for r in built.mocks.resources
        if r.typ.startswith("kubernetes:") and "/" in r.typ and "helm.sh" not in r.typ
    ]
    kinds = {o["kind"] for o in objects}
    assert {"PriorityClass", "PodDisruptionBudget", "DaemonSet", "StatefulSet"} <= kinds
    for obj in objects:
        validate(obj)


def test_monitoring_can_be_turned_off():
    bare = build_stack({"platform": "aks", "gpuPools": [], "monitoring": "false"}, SECRETS)
    assert bare.of_type("kubernetes:helm.sh/v3:Release") == []
    assert not [r for r in bare.mocks.resources if "dcgm" in r.name]


def test_managed_control_plane_alerts_are_off(built):
    """Issue 35 item 10: KubeSchedulerDown / KubeControllerManagerDown fired for good on
    AKS, whose control plane cannot be scraped."""
    (release,) = built.of_type("kubernetes:helm.sh/v3:Release")
    values = release.inputs["values"]
    for component in ("kubeScheduler", "kubeControllerManager", "kubeEtcd"):
        assert values[component] == {"enabled": False}, component
    rules = values["defaultRules"]["rules"]
    assert not rules["kubeSchedulerAlerting"] and not rules["kubeControllerManager"]
    assert "config" not in values["alertmanager"]  # no receivers set: the chart's default


def test_alert_receivers_come_from_stack_config():
    """Issue 35 item 10: every alert went to the chart's null receiver, with no setting."""
    hook = {"name": "team", "webhook_configs": [{"url": "https://hooks.example.com/pasture"}]}
    with_receiver = build_stack(
        {"platform": "aks", "gpuPools": [], "alertReceivers": [hook]}, SECRETS
    )
    (release,) = with_receiver.of_type("kubernetes:helm.sh/v3:Release")
    config = release.inputs["values"]["alertmanager"]["config"]
    assert config["route"]["receiver"] == "team"
    assert config["receivers"] == [{"name": "null"}, hook]
    assert config["route"]["routes"][0]["receiver"] == "null"  # Watchdog only
    with pytest.raises(ConfigError, match=r"^pasture:alertReceivers: .*other than 'null'"):
        parse_config({"platform": "aks", "alertReceivers": [{"webhook_configs": []}]})
    with pytest.raises(ConfigError, match=r"^pasture:alertReceivers: .*unique receiver names"):
        parse_config({"platform": "aks", "alertReceivers": [{"name": "a"}, {"name": "a"}]})
