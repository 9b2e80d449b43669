"""The aks stack's autoscaling, upgrade and monitoring objects under Pulumi mocks, checked
with kubernetes-validate (tests/k8s_manifests.py) and against the scheduler code that
reads them (the autoscaler's pools, the liveness probes' module)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from scheduler.k8s.autoscale import (
    PLACEHOLDER_PRIORITY,
    POOLS_ENV,
    PRIORITY_CLASS,
    pools_from_env,
)
from stacks.aks.agents import HOLD_LOCK, LOCK_FILE
from stacks.aks.monitoring import METRICS_TOKEN_SECRET, alert_rules
from stacks.aks.names import node_resource_group_name
from tests.k8s_manifests import manifest, validate
from tests.stacks.mocks import build_stack

pytestmark = pytest.mark.stacks

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
        if owner.endswith("-redis"):
            continue  # stacks/aks/redis.py: Redis Sentinel work of issue 25 (another helper)
        seen.add(c["name"])
        assert c.get("resources", {}).get("requests"), f"{owner}/{c['name']} has no requests"
        assert c.get("livenessProbe"), f"{owner}/{c['name']} has no liveness probe"
    assert {"api", "loop", "agent", "nvidia-device-plugin", "dcgm-exporter"} <= seen


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


def test_task_pods_have_a_disruption_budget(built):
    pdb = inputs(built, f"{LONGEST}-tasks-pdb")["spec"]
    assert pdb["maxUnavailable"] == 0
    assert pdb["selector"]["matchExpressions"] == [{"key": "pasture/job", "operator": "Exists"}]


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
    assert rules == alert_rules()
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
    assert {"PriorityClass", "PodDisruptionBudget", "DaemonSet"} <= kinds
    for obj in objects:
        validate(obj)


def test_monitoring_can_be_turned_off():
    bare = build_stack({"platform": "aks", "gpuPools": [], "monitoring": "false"}, SECRETS)
    assert bare.of_type("kubernetes:helm.sh/v3:Release") == []
    assert not [r for r in bare.mocks.resources if "dcgm" in r.name]
