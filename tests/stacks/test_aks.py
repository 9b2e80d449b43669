"""Policies of the aks stack under mocks: GPU pools (size, taints, autoscaler bounds),
ACR attached, the share, workloads on the AKS provider, kubeconfig secret, and agent
settings that the kubernetes executor and the settings models accept."""

from __future__ import annotations

import json

import pytest
import yaml
from inventory_checks import check_inventory_listing, run_preflight

from scheduler.agent.executor import TaskLaunch
from scheduler.agent.kubernetes import PodSettings, build_pod
from scheduler.inventory import parse_stack_output, write_inventory
from scheduler.settings import AgentSettings, SchedulerSettings
from stacks.aks import ACR_PULL_ROLE
from tests.stacks.mocks import build_stack

pytestmark = pytest.mark.stacks

SECRET_SIG = "4dabf18193072939515e22adb298388d"  # pulumi's secret marker on the wire
SECRETS = {"redisPassword": "redis-password-0123456789abcdef"}
POOLS = [
    {
        "name": "a100",
        "vm_size": "Standard_NC24ads_A100_v4",
        "min_count": 1,
        "max_count": 5,
        "count": 2,
        "spot": True,
        "labels": {"accelerator": "a100"},
    },
    {
        "name": "t4",
        "vm_size": "Standard_NC4as_T4_v3",
        "min_count": 0,
        "max_count": 3,
        "count": 0,
        "taints": ["nvidia.com/gpu=present:NoSchedule", "dedicated=t4:NoExecute"],
    },
]


@pytest.fixture(scope="module")
def aks():
    return build_stack(
        {
            "platform": "aks",
            "clusterName": "aks-dev",
            "allowedCidrs": ["203.0.113.0/24"],
            "gpuPools": POOLS,
            "systemPool": {"vm_size": "Standard_D8s_v5", "count": 3},
        },
        SECRETS,
    )


@pytest.fixture(scope="module")
def aks_default():
    return build_stack({"platform": "aks"}, SECRETS)


def k8s_resource(built, name: str):
    return built.named(name).inputs


def test_gpu_pools_follow_config_with_taints_and_autoscaler_bounds(aks):
    pools = {
        r.inputs["agentPoolName"]: r.inputs
        for r in aks.of_type("azure-native:containerservice:AgentPool")
    }
    assert sorted(pools) == ["a100", "t4"]
    a100, t4 = pools["a100"], pools["t4"]
    for pool, spec in ((a100, POOLS[0]), (t4, POOLS[1])):
        assert pool["mode"] == "User"
        assert pool["enableAutoScaling"] is True
        assert (pool["minCount"], pool["count"], pool["maxCount"]) == (
            spec["min_count"],
            spec["count"],
            spec["max_count"],
        )
        assert pool["vmSize"] == spec["vm_size"]
        assert pool["resourceName"] == "aks-dev-aks"  # attached to the cluster
    assert a100["nodeTaints"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert t4["nodeTaints"] == ["nvidia.com/gpu=present:NoSchedule", "dedicated=t4:NoExecute"]
    assert a100["nodeLabels"] == {"accelerator": "a100", "pool": "a100", "pasture/pool": "a100"}
    assert a100["scaleSetPriority"] == "Spot" and "scaleSetPriority" not in t4


def test_system_pool_and_api_server_access(aks, aks_default):
    (cluster,) = aks.of_type("azure-native:containerservice:ManagedCluster")
    (system,) = cluster.inputs["agentPoolProfiles"]
    assert system["mode"] == "System" and system["count"] == 3
    assert system["vmSize"] == "Standard_D8s_v5"
    assert cluster.inputs["enableRBAC"] is True
    assert cluster.inputs["apiServerAccessProfile"]["authorizedIPRanges"] == ["203.0.113.0/24"]
    (default,) = aks_default.of_type("azure-native:containerservice:ManagedCluster")
    assert "apiServerAccessProfile" not in default.inputs


def test_no_service_is_open_to_the_world_unless_configured(aks, aks_default):
    api = k8s_resource(aks, "aks-dev-api")
    assert api["spec"]["type"] == "LoadBalancer"
    assert api["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    default = k8s_resource(aks_default, "pasture-api")
    assert "loadBalancerSourceRanges" not in default["spec"]
    annotations = default["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/azure-load-balancer-internal"] == "true"


def test_registry_is_attached_to_the_kubelet_identity(aks):
    (registry,) = aks.of_type("azure-native:containerregistry:Registry")
    assert registry.inputs["adminUserEnabled"] is False
    (assignment,) = aks.of_type("azure-native:authorization:RoleAssignment")
    assert assignment.inputs["principalId"] == "kubelet-object-id"
    assert assignment.inputs["roleDefinitionId"].endswith(f"/roleDefinitions/{ACR_PULL_ROLE}")
    assert assignment.inputs["roleDefinitionId"].startswith(
        "/subscriptions/00000000-0000-0000-0000-000000000001/"
    )
    assert assignment.inputs["scope"] == "/mock/azure-native:containerregistry:Registry/aksdevacr"
    image = k8s_resource(aks, "aks-dev-scheduler")["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] == "aksdevacr.azurecr.io/pasture:0.1.0"


def test_workloads_use_the_aks_provider_and_kubeconfig_stays_secret(aks):
    (provider,) = aks.of_type("pulumi:providers:kubernetes")
    kubeconfig = provider.inputs["kubeconfig"]
    assert isinstance(kubeconfig, dict) and "clusterUser" in kubeconfig["value"]  # secret
    workloads = [r for r in aks.mocks.resources if r.typ.startswith("kubernetes:")]
    assert len(workloads) >= 15
    for res in workloads:
        assert res.provider.startswith("urn:pulumi:test::pasture::"), res.name
        assert res.provider.endswith("::/mock/pulumi:providers:kubernetes/aks-dev-k8s")
    assert "kubeconfig" in aks.secret_outputs
    assert "clusterUser" in aks.outputs["kubeconfig"]
    for key in ("master", "nodes", "api_endpoint"):
        assert key not in aks.secret_outputs


def test_secrets_reach_kubernetes_only_as_secrets(aks):
    # A secret input arrives wrapped ({<secret sig>: ..., "value": ...}), never in clear.
    redis = k8s_resource(aks, "aks-dev-redis-secret")["stringData"]
    assert SECRET_SIG in redis
    assert redis["value"] == {"redis-password": SECRETS["redisPassword"]}
    share = k8s_resource(aks, "aks-dev-share-secret")["stringData"]
    assert SECRET_SIG in share
    assert share["value"]["azurestorageaccountkey"] == "c3RvcmFnZS1rZXk="


def test_azure_files_share_is_the_cluster_share(aks):
    (fs,) = aks.of_type("azure-native:storage:FileShare")
    assert fs.inputs["shareName"] == "pasture" and fs.inputs["shareQuota"] == 100
    (account,) = aks.of_type("azure-native:storage:StorageAccount")
    assert account.inputs["allowBlobPublicAccess"] is False
    assert account.inputs["minimumTlsVersion"] == "TLS1_2"
    pv = k8s_resource(aks, "aks-dev-share-pv")["spec"]
    assert pv["csi"]["driver"] == "file.csi.azure.com"
    assert pv["csi"]["volumeAttributes"] == {"shareName": "pasture"}
    assert pv["csi"]["nodeStageSecretRef"] == {"name": "pasture-share", "namespace": "pasture"}
    assert pv["accessModes"] == ["ReadWriteMany"]
    pvc = k8s_resource(aks, "aks-dev-share-pvc")
    assert pvc["metadata"]["name"] == "pasture-share"
    assert pvc["spec"]["volumeName"] == "pasture-share"


def test_redis_statefulset_keeps_its_data_and_requires_the_password(aks):
    sts = k8s_resource(aks, "aks-dev-redis")["spec"]
    assert sts["replicas"] == 1
    (claim,) = sts["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    (redis,) = sts["template"]["spec"]["containers"]
    assert redis["args"][:2] == ["--requirepass", "$(REDIS_PASSWORD)"]
    assert redis["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "pasture-redis"


def test_scheduler_runs_api_and_loop_with_contract_settings(aks):
    dep = k8s_resource(aks, "aks-dev-scheduler")["spec"]
    assert dep["strategy"]["type"] == "Recreate"  # never two loops at once
    commands = [c["command"] for c in dep["template"]["spec"]["containers"]]
    cfg = "/etc/pasture/config/scheduler.yaml"
    assert commands == [
        ["pasture", "serve", "api", "--config", cfg],
        ["pasture", "serve", "loop", "--config", cfg],
    ]
    data = k8s_resource(aks, "aks-dev-config")["data"]
    settings = SchedulerSettings.model_validate(yaml.safe_load(data["scheduler.yaml"]))
    assert settings.api.port == 8443 and settings.cluster_name == "aks-dev"
    agent = yaml.safe_load(
        data["agent.yaml"]
        .replace("__NODE_NAME__", "aks-a100-12345678-vmss000000")
        .replace("__NODE_ADDRESS__", "10.224.0.5")
    )
    agent_settings = AgentSettings.model_validate(agent)
    assert agent_settings.executor == "kubernetes"
    assert str(agent_settings.share_dir) == "/mnt/pasture"


def test_agent_daemonset_configures_the_kubernetes_executor(aks, tmp_path):
    ds = k8s_resource(aks, "aks-dev-agent")["spec"]["template"]["spec"]
    assert ds["serviceAccountName"] == "pasture-agent" and ds["hostNetwork"] is True
    terms = ds["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expr,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expr == {"key": "pasture/pool", "operator": "In", "values": ["a100", "t4"]}
    (container,) = ds["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    settings = PodSettings.from_env({k: v for k, v in env.items() if v is not None})
    assert settings.namespace == "pasture" and settings.share_claim == "pasture-share"
    assert settings.default_image == "aksdevacr.azurecr.io/pasture:0.1.0"
    # a task pod built with these settings tolerates every GPU pool taint
    taints = {t for p in POOLS for t in p.get("taints", ["nvidia.com/gpu=present:NoSchedule"])}
    launch = TaskLaunch(
        task_id="j-worker-0-a1",
        job="j",
        role="worker",
        index=0,
        attempt=1,
        node="aks-t4-1-vmss000000",
        command="true",
        image=None,
        env={},
        cpu_m=1000,
        memory=2**30,
        gpus=[0],
        log_path=tmp_path / "l.log",
        share_dir=tmp_path,
        state_dir=tmp_path,
    )
    pod = build_pod(launch, settings)
    tolerated = {
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
        for t in pod.spec.tolerations
    }
    assert taints <= tolerated
    assert json.loads(env["PASTURE_K8S_TOLERATIONS"]) == sorted(taints)
    role = k8s_resource(aks, "aks-dev-agent-role")["rules"][0]
    assert role["resources"] == ["pods"] and "create" in role["verbs"]


def test_nvidia_device_plugin_runs_on_gpu_pools(aks):
    ds = k8s_resource(aks, "aks-dev-nvidia-device-plugin")["spec"]["template"]["spec"]
    (container,) = ds["containers"]
    assert container["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in ds[
        "tolerations"
    ]


def test_outputs_match_the_contract(aks):
    outputs = parse_stack_output(aks.outputs)
    assert outputs.platform == "aks"
    assert outputs.master.address == "10.224.0.200"  # the API Service's load balancer
    assert outputs.master.connection == "local"
    assert outputs.nodes == []  # autoscaled nodes join through the agent DaemonSet
    assert outputs.api_endpoint == "http://10.224.0.200:8443"


def test_inventory_is_listed_and_preflight_refuses_to_converge_it(aks, tmp_path):
    """site.yml does not converge an aks cluster (Pulumi deploys the workloads, nodes are
    autoscaled); the preflight play must refuse its inventory, not half-run on it."""
    outputs = parse_stack_output(aks.outputs)
    path = write_inventory(outputs, tmp_path / "inventory.yml")
    check_inventory_listing(outputs, path)
    proc = run_preflight(path, tmp_path)
    assert proc.returncode != 0
    assert "group `nodes` with at least one host" in proc.stdout


def test_agents_use_their_own_restricted_redis_user_not_the_admin_password(aks):
    from scheduler.store.acl import agent_rules

    (redis,) = k8s_resource(aks, "aks-dev-redis")["spec"]["template"]["spec"]["containers"]
    user = redis["args"][redis["args"].index("--user") :]
    assert user[1:5] == ["pasture-agent", "reset", "on", ">$(AGENT_PASSWORD)"]
    assert user[5:] == ["resetchannels", *agent_rules("*")]
    assert "-@all" in user and "+@all" not in user
    agent_secret = k8s_resource(aks, "aks-dev-redis-agent-secret")["stringData"]
    assert SECRET_SIG in agent_secret
    derived = agent_secret["value"]["agent-password"]
    assert len(derived) == 64 and derived != SECRETS["redisPassword"]
    ds = k8s_resource(aks, "aks-dev-agent")["spec"]["template"]["spec"]
    secret_names = {v["secret"]["secretName"] for v in ds["volumes"] if "secret" in v}
    assert secret_names == {"pasture-redis-agent"}  # never the admin password
    data = k8s_resource(aks, "aks-dev-config")["data"]
    agent = AgentSettings.model_validate(
        yaml.safe_load(
            data["agent.yaml"].replace("__NODE_NAME__", "n").replace("__NODE_ADDRESS__", "1.2.3.4")
        )
    )
    assert agent.redis.username == "pasture-agent"
    assert str(agent.redis.password_file) == "/etc/pasture/secrets/agent-password"
