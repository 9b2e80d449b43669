"""Policies of the aks stack under mocks: GPU pools (size, taints, autoscaler bounds),
ACR attached, the share, workloads on the AKS provider, kubeconfig secret, and agent
settings that the kubernetes executor and the settings models accept; the defects of
issue 18: the image built and pushed in the same run with the workloads on its digest,
the Spot taint tolerated by every DaemonSet and task pod of a Spot pool, Azure names that
fit for the longest clusterName, ``gpuPools: []``, and every Kubernetes object valid
(kubernetes-validate, strict, 1.30-1.34)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from inventory_checks import check_inventory_listing, run_preflight

from scheduler.agent.executor import TaskLaunch
from scheduler.agent.kubernetes import PodSettings, build_pod
from scheduler.inventory import parse_stack_output, write_inventory
from scheduler.k8s.capacity import NODE_ENV
from scheduler.k8s.taints import SPOT_TAINT
from scheduler.nodecred import AUDIENCE
from scheduler.sealed import load_key, seal, unseal
from scheduler.settings import AgentSettings, SchedulerSettings
from stacks.aks import ACR_PULL_ROLE
from stacks.aks.agents import ADDRESS_ENV, POOL_ENV, START_AGENT
from stacks.aks.image import CONTAINERFILE, REPO_ROOT
from stacks.aks.names import registry_name, storage_account_name
from stacks.aks.nodecred import FETCH_CREDENTIAL, URL_ENV
from stacks.aks.sealkey import KEY_FILE, KEY_SECRET, derive_key
from stacks.config import ConfigError, parse_config
from tests.k8s_manifests import manifest, validate
from tests.stacks.mocks import SSH_KEY, Built, build_stack

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


def stack(config: dict) -> Built:
    """Build the aks program; ``prefix`` is the cluster name, ``image`` the reference the
    workloads must run (the pushed digest when the stack builds the image)."""
    built = build_stack({"platform": "aks", **config}, SECRETS)
    built.prefix = config.get("clusterName", "pasture")
    if config.get("pastureImage"):
        built.image = config["pastureImage"]
    else:
        (registry,) = built.of_type("azure-native:containerregistry:Registry")
        digest = hashlib.sha256(f"{built.prefix}-image".encode()).hexdigest()
        built.image = f"{registry.inputs['registryName']}.azurecr.io/pasture@sha256:{digest}"
    return built


@pytest.fixture(scope="module")
def aks():
    return stack(
        {
            "clusterName": "aks-dev",
            "allowedCidrs": ["20.61.0.0/24"],
            "gpuPools": POOLS,
            "systemPool": {"vm_size": "Standard_D8s_v5", "count": 3},
        }
    )


@pytest.fixture(scope="module")
def aks_default():
    return stack({})


# The longest clusterName config accepts (32 chars), no GPU pool, an image of the user's.
LONGEST = "training-cluster-0123456789abcde"
OWN_IMAGE = "registry.example.com/team/pasture@sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def aks_bare():
    return stack({"clusterName": LONGEST, "gpuPools": [], "pastureImage": OWN_IMAGE})


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
    assert a100["nodeLabels"] == {
        "accelerator": "a100",
        "pool": "a100",
        "pasture/pool": "a100",
        "pasture/gpu-model": "A100",
    }
    assert a100["scaleSetPriority"] == "Spot" and "scaleSetPriority" not in t4


def test_system_pool_and_api_server_access(aks, aks_default):
    (cluster,) = aks.of_type("azure-native:containerservice:ManagedCluster")
    (system,) = cluster.inputs["agentPoolProfiles"]
    assert system["mode"] == "System" and system["count"] == 3
    assert system["vmSize"] == "Standard_D8s_v5"
    assert cluster.inputs["enableRBAC"] is True
    assert cluster.inputs["apiServerAccessProfile"]["authorizedIPRanges"] == ["20.61.0.0/24"]
    (default,) = aks_default.of_type("azure-native:containerservice:ManagedCluster")
    assert "apiServerAccessProfile" not in default.inputs


def test_no_service_is_open_to_the_world_unless_configured(aks, aks_default):
    api = k8s_resource(aks, "aks-dev-api")
    assert api["spec"]["type"] == "LoadBalancer"
    assert api["spec"]["loadBalancerSourceRanges"] == ["20.61.0.0/24"]
    default = k8s_resource(aks_default, "pasture-api")
    assert "loadBalancerSourceRanges" not in default["spec"]
    annotations = default["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/azure-load-balancer-internal"] == "true"


def test_registry_is_attached_to_the_kubelet_identity(aks):
    (registry,) = aks.of_type("azure-native:containerregistry:Registry")
    assert registry.inputs["adminUserEnabled"] is True  # the build pushes with it
    (assignment,) = aks.of_type("azure-native:authorization:RoleAssignment")
    assert assignment.inputs["principalId"] == "kubelet-object-id"
    assert assignment.inputs["roleDefinitionId"].endswith(f"/roleDefinitions/{ACR_PULL_ROLE}")
    assert assignment.inputs["roleDefinitionId"].startswith(
        "/subscriptions/00000000-0000-0000-0000-000000000001/"
    )
    assert assignment.inputs["scope"] == "/mock/azure-native:containerregistry:Registry/aks-dev-acr"


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
    assert sts["replicas"] == 3  # a primary, two replicas (issue 25: failover)
    (claim,) = sts["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    (redis,) = sts["template"]["spec"]["containers"]
    assert redis["args"][:2] == ["--requirepass", "$(REDIS_PASSWORD)"]
    assert redis["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "pasture-redis"


def test_redis_has_a_sentinel_per_pod_and_clients_follow_them(aks, tmp_path):
    """Issue 25: each Redis pod runs a sentinel (native sidecar, quorum 2 of 3); a pod
    starts as the replica of the primary the sentinels name; clients get the sentinels."""
    sts = k8s_resource(aks, "aks-dev-redis")["spec"]
    (sentinel,) = sts["template"]["spec"]["initContainers"]
    assert sentinel["restartPolicy"] == "Always"
    script = sentinel["command"][2]
    assert "sentinel monitor pasture pasture-redis-0.pasture-redis." in script
    assert " 6379 2" in script and "--sentinel" in script
    assert "user default on nopass -@all" in script  # clients: read-only commands
    (redis,) = sts["template"]["spec"]["containers"]
    assert "--replicaof" in redis["command"][2]
    assert "get-master-addr-by-name" in redis["command"][2]
    svc = k8s_resource(aks, "aks-dev-redis-svc")["spec"]
    assert svc["clusterIP"] == "None"
    assert {p["port"] for p in svc["ports"]} == {6379, 26379}
    from stacks.aks.redis import agent_redis_settings, redis_settings

    for settings in (redis_settings("pasture"), agent_redis_settings("pasture", "n")):
        assert len(settings.sentinels) == 3 and settings.sentinel_master == "pasture"


def test_scheduler_runs_api_and_loop_with_contract_settings(aks, tmp_path):
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
    # The agent container's start script, run by a real shell on the ConfigMap's text
    # (paths moved under tmp_path; `cat` instead of starting the agent).
    etc = tmp_path / "etc" / "pasture"
    (etc / "config").mkdir(parents=True)
    (etc / "config" / "agent.yaml").write_text(data["agent.yaml"])
    # (the credential exchange is tested against a real API in test_node_credentials.py)
    (tmp_path / "agent-dir").mkdir()
    script = (
        START_AGENT.replace(FETCH_CREDENTIAL, "true")
        .replace("/etc/pasture", str(etc))
        .replace("/var/lib/pasture", str(tmp_path / "agent-dir"))
        .replace("exec pasture agent run --config", "cat")
    )
    env = {
        NODE_ENV: "aks-a100-12345678-vmss000000",
        ADDRESS_ENV: "10.224.0.5",
        POOL_ENV: "a100",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        ["/bin/sh", "-c", script], env=env, capture_output=True, text=True, check=True
    )
    agent_settings = AgentSettings.model_validate(yaml.safe_load(out.stdout))
    assert agent_settings.node_name == "aks-a100-12345678-vmss000000"
    assert agent_settings.address == "10.224.0.5"
    assert agent_settings.labels == {"pasture/pool": "a100"}  # the autoscaler counts by it
    assert agent_settings.executor == "kubernetes"
    assert str(agent_settings.share_dir) == "/mnt/pasture"
    # the node's own ACL user, its password fetched at start, never the admin password
    assert agent_settings.redis.username == "node-aks-a100-12345678-vmss000000"
    assert agent_settings.redis.password_file == Path("/run/pasture/node-password")
    creds = settings.api.node_credentials
    assert creds.namespace == "pasture" and creds.service_account == "pasture-agent"
    assert creds.secret_file == Path("/etc/pasture/secrets/redis-password")


def task_launch(tmp_path, node: str) -> TaskLaunch:
    return TaskLaunch(
        task_id="j-worker-0-a1",
        job="j",
        role="worker",
        index=0,
        attempt=1,
        node=node,
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


def agent_env(built, pool: str) -> dict[str, str]:
    ds = k8s_resource(built, f"{built.prefix}-agent-{pool}")["spec"]["template"]["spec"]
    (container,) = ds["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def as_taints(tolerations) -> set[str]:
    """Tolerations (wire dicts or V1Toleration) back to ``key[=value]:Effect``."""
    out = set()
    for t in tolerations:
        t = t if isinstance(t, dict) else t.to_dict()
        out.add(
            f"{t['key']}={t['value']}:{t['effect']}"
            if t.get("value")
            else f"{t['key']}:{t['effect']}"
        )
    return out


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p["name"])
def test_each_pool_has_an_agent_daemonset_that_configures_the_executor(aks, pool, tmp_path):
    name = pool["name"]
    ds = k8s_resource(aks, f"aks-dev-agent-{name}")
    assert ds["metadata"]["name"] == f"pasture-agent-{name}"
    spec = ds["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "pasture-agent" and spec["hostNetwork"] is True
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expr,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expr == {"key": "pasture/pool", "operator": "In", "values": [name]}
    env = agent_env(aks, name)
    settings = PodSettings.from_env(env)
    assert settings.namespace == "pasture" and settings.share_claim == "pasture-share"
    assert settings.default_image == aks.image
    # the agent and the task pods it binds tolerate exactly this pool's taints
    taints = set(pool.get("taints", ["nvidia.com/gpu=present:NoSchedule"]))
    if pool.get("spot"):
        taints.add(SPOT_TAINT)
    assert as_taints(spec["tolerations"]) == taints
    pod = build_pod(task_launch(tmp_path, f"aks-{name}-1-vmss000000"), settings)
    assert as_taints(pod.spec.tolerations) == taints
    assert set(json.loads(env["PASTURE_K8S_TOLERATIONS"])) == taints
    # fencing: the agent's work dir is on the node, and its task pods get the fence sidecar
    assert settings.agent_dir == "/var/lib/pasture"
    (agent,) = spec["containers"]
    [vol] = [v for v in spec["volumes"] if v["name"] == "agent-dir"]
    assert vol["hostPath"] == {"path": "/var/lib/pasture", "type": "DirectoryOrCreate"}
    assert {"name": "agent-dir", "mountPath": "/var/lib/pasture"} in agent["volumeMounts"]
    fenced = task_launch(tmp_path, "n")
    fenced = type(fenced)(
        **{
            **fenced.__dict__,
            "lease_file": Path("/var/lib/pasture/lease"),
            "state_dir": Path("/var/lib/pasture/tasks/t"),
        }
    )
    assert build_pod(fenced, settings).spec.share_process_namespace is True


def test_spot_pool_tolerates_the_aks_spot_taint_everywhere_and_others_do_not(aks, tmp_path):
    """AKS taints Spot nodes kubernetes.azure.com/scalesetpriority=spot:NoSchedule: the
    agent, the device plugin and the task pods of a Spot pool must tolerate it."""
    spot = {
        "key": "kubernetes.azure.com/scalesetpriority",
        "operator": "Equal",
        "value": "spot",
        "effect": "NoSchedule",
    }
    for pool, is_spot in (("a100", True), ("t4", False)):
        for ds in (f"aks-dev-agent-{pool}", f"aks-dev-nvidia-device-plugin-{pool}"):
            tolerations = k8s_resource(aks, ds)["spec"]["template"]["spec"]["tolerations"]
            assert (spot in tolerations) is is_spot, ds
        pod = build_pod(task_launch(tmp_path, "n"), PodSettings.from_env(agent_env(aks, pool)))
        assert (SPOT_TAINT in as_taints(pod.spec.tolerations)) is is_spot, pool


def test_agents_may_read_their_node_object(aks):
    """The agent reads its capacity from the node object: a ClusterRole with get on nodes
    bound to the agents' service account; the DaemonSet gives it the node's name."""
    role = k8s_resource(aks, "aks-dev-agent-nodes")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = k8s_resource(aks, "aks-dev-agent-nodes-binding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "pasture-agent-nodes"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "pasture-agent", "namespace": "pasture"}
    ]
    ds = k8s_resource(aks, "aks-dev-agent-a100")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in ds["containers"][0]["env"]}
    assert env[NODE_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    pods = k8s_resource(aks, "aks-dev-agent-role")["rules"][0]
    assert pods["resources"] == ["pods"] and "create" in pods["verbs"]


def test_agents_may_create_and_delete_secrets_in_their_namespace_only(aks):
    """The kubernetes executor puts a task's job secrets in a Secret its pod references:
    the agents' namespaced Role may create and delete Secrets (not read or list them), and
    no cluster-wide role of theirs names Secrets."""
    role = k8s_resource(aks, "aks-dev-agent-role")
    assert role["metadata"]["namespace"] == "pasture"
    (rule,) = [r for r in role["rules"] if "secrets" in r["resources"]]
    assert rule == {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete"]}
    binding = k8s_resource(aks, "aks-dev-agent-binding")
    assert binding["metadata"]["namespace"] == "pasture"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "pasture-agent",
    }
    cluster_roles = aks.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
    assert cluster_roles  # the agents' nodes role at least
    for r in cluster_roles:
        assert "secrets" not in json.dumps(r.inputs.get("rules", [])), r.name


def test_the_secrets_key_reaches_the_api_and_the_agents_as_a_secret(aks, tmp_path):
    """Jobs with secrets are no longer refused on aks: the API and every agent get the
    cluster's Fernet key (derived from the Redis password, a Pulumi secret), as a mounted
    Secret named by secrets_key_file in both settings; a value sealed with it by the API
    opens in an agent."""
    data = k8s_resource(aks, "aks-dev-secrets-key")["stringData"]
    assert SECRET_SIG in json.dumps(data)  # stays a Pulumi secret
    text = json.dumps(data)
    key = derive_key(SECRETS["redisPassword"])
    assert key in text and SECRETS["redisPassword"] not in text
    cm = k8s_resource(aks, "aks-dev-config")["data"]
    sched = SchedulerSettings.model_validate(yaml.safe_load(cm["scheduler.yaml"]))
    agent = AgentSettings.model_validate(
        yaml.safe_load(cm["agent.yaml"].replace("PASTURE_NODE_NAME", "n"))
    )
    assert sched.secrets_key_file == agent.secrets_key_file == KEY_FILE
    api, loop = k8s_resource(aks, "aks-dev-scheduler")["spec"]["template"]["spec"]["containers"]
    ds = k8s_resource(aks, "aks-dev-agent-t4")["spec"]["template"]["spec"]
    for container in (api, ds["containers"][0]):
        mount = [m for m in container["volumeMounts"] if m["mountPath"] == str(KEY_FILE.parent)]
        assert mount and mount[0]["readOnly"] is True, container["name"]
    assert not [m for m in loop["volumeMounts"] if m["mountPath"] == str(KEY_FILE.parent)]
    (vol,) = [v for v in ds["volumes"] if v["name"] == "secrets-key"]
    assert vol["secret"]["secretName"] == KEY_SECRET
    (tmp_path / "secrets.key").write_text(key)
    opened = load_key(tmp_path / "secrets.key")  # a valid Fernet key
    token = seal(opened, "j", {"HF_TOKEN": "v"})
    assert unseal(opened, "j", token) == {"HF_TOKEN": "v"}
    assert derive_key("another-password") != key


def test_nvidia_device_plugin_runs_on_each_gpu_pool(aks):
    for pool in ("a100", "t4"):
        ds = k8s_resource(aks, f"aks-dev-nvidia-device-plugin-{pool}")["spec"]["template"]["spec"]
        (container,) = ds["containers"]
        assert container["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        assert gpu in ds["tolerations"]
        terms = ds["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [pool]


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


def test_each_agent_gets_its_own_nodes_redis_user_for_its_pod_token(aks):
    """No shared agent credential (issue 13 item 4): Redis knows no agent user and agents
    mount no Redis secret; each exchanges its pod's projected token (audience of
    scheduler.nodecred) with the API, whose service account may review tokens and read
    pods."""
    (redis,) = k8s_resource(aks, "aks-dev-redis")["spec"]["template"]["spec"]["containers"]
    assert "--user" not in redis["args"]
    assert not [r for r in aks.mocks.resources if r.name == "aks-dev-redis-agent-secret"]
    ds = k8s_resource(aks, "aks-dev-agent-a100")["spec"]["template"]["spec"]
    # neither admin nor shared Redis password: the one Secret is the secrets key
    assert [v["secret"]["secretName"] for v in ds["volumes"] if "secret" in v] == [KEY_SECRET]
    (token,) = [v for v in ds["volumes"] if v["name"] == "node-token"]
    (source,) = token["projected"]["sources"]
    assert source["serviceAccountToken"] == {
        "audience": AUDIENCE,
        "expirationSeconds": 3600,
        "path": "token",
    }
    (cred,) = [v for v in ds["volumes"] if v["name"] == "node-credential"]
    assert cred["emptyDir"] == {"medium": "Memory"}
    (agent,) = ds["containers"]
    assert agent["command"][-1].startswith("python3 -m scheduler.agent.credential")
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env[URL_ENV] == "http://pasture-api.pasture.svc:8443/api/v1/node-credentials"
    data = k8s_resource(aks, "aks-dev-config")["data"]
    assert "username: node-PASTURE_NODE_NAME" in data["agent.yaml"]
    # the API's identity: token reviews (system:auth-delegator) and pod reads
    dep = k8s_resource(aks, "aks-dev-scheduler")["spec"]["template"]["spec"]
    assert dep["serviceAccountName"] == "pasture-scheduler"
    review = k8s_resource(aks, "aks-dev-scheduler-tokenreview")
    assert review["roleRef"]["name"] == "system:auth-delegator"
    assert review["subjects"] == [
        {"kind": "ServiceAccount", "name": "pasture-scheduler", "namespace": "pasture"}
    ]
    role = k8s_resource(aks, "aks-dev-scheduler-role")
    # pods (agents' pods, the autoscaler's placeholders) and the autoscaler's events
    assert [r["resources"] for r in role["rules"]] == [["pods"], ["events"]]
    assert "secrets" not in json.dumps(role["rules"])


def workload_images(built) -> set[str]:
    images = set()
    for res in built.mocks.resources:
        if res.typ in ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:DaemonSet"):
            for c in res.inputs["spec"]["template"]["spec"]["containers"]:
                if c["name"] not in ("nvidia-device-plugin", "dcgm-exporter"):
                    images.add(c["image"])
    return images


def test_first_up_builds_and_pushes_the_image_the_workloads_run(aks_default):
    """One ``pulumi up``: the Containerfile is built and pushed to the stack's registry,
    and the scheduler and agents run the pushed digest (they depend on the push)."""
    (image,) = aks_default.of_type("docker-build:index:Image")
    inputs = image.inputs
    assert inputs["push"] is True
    assert inputs["context"] == {"location": str(REPO_ROOT)}
    assert inputs["dockerfile"] == {"location": str(CONTAINERFILE)} and CONTAINERFILE.is_file()
    assert inputs["buildArgs"] == {"BASE_IMAGE": "python:3.11-slim"}
    (registry,) = aks_default.of_type("azure-native:containerregistry:Registry")
    server = f"{registry.inputs['registryName']}.azurecr.io"
    assert inputs["tags"][0].startswith(f"{server}/pasture:")
    assert SECRET_SIG in inputs["registries"]  # the admin password stays secret
    (creds,) = inputs["registries"]["value"]
    assert creds["address"] == server and creds["username"] == registry.inputs["registryName"]
    assert creds["password"] == "acr-admin-password"
    assert aks_default.image.startswith(f"{server}/pasture@sha256:")
    assert workload_images(aks_default) == {aks_default.image}
    env = agent_env(aks_default, "gpu")
    assert env["PASTURE_K8S_IMAGE"] == aks_default.image  # task pods without an image


def test_an_image_given_by_reference_is_not_built(aks_bare):
    assert aks_bare.of_type("docker-build:index:Image") == []
    (registry,) = aks_bare.of_type("azure-native:containerregistry:Registry")
    assert registry.inputs["adminUserEnabled"] is False
    assert workload_images(aks_bare) == {OWN_IMAGE}


def test_no_gpu_pool_gives_no_daemonset_and_valid_objects(aks_bare):
    assert aks_bare.of_type("azure-native:containerservice:AgentPool") == []
    assert aks_bare.of_type("kubernetes:apps/v1:DaemonSet") == []
    kinds = {
        r.typ.rsplit(":", 1)[1] for r in aks_bare.mocks.resources if r.typ.startswith("kubernetes:")
    }
    assert {"Deployment", "StatefulSet", "Service", "ServiceAccount"} <= kinds


def test_azure_names_fit_for_the_longest_cluster_name(aks_bare):
    (account,) = aks_bare.of_type("azure-native:storage:StorageAccount")
    assert re.fullmatch(r"[a-z0-9]{3,24}", account.inputs["accountName"])
    (registry,) = aks_bare.of_type("azure-native:containerregistry:Registry")
    assert re.fullmatch(r"[a-zA-Z0-9]{5,50}", registry.inputs["registryName"])
    assert account.inputs["accountName"].startswith("trainingcluster0")


@given(st.from_regex(r"[a-z][a-z0-9-]{0,30}[a-z0-9]|[a-z]", fullmatch=True), st.text(max_size=40))
def test_names_fit_for_every_cluster_name_config_accepts(cluster, scope):
    parse_config({"platform": "aks", "clusterName": cluster})  # accepted by config
    assert re.fullmatch(r"[a-z0-9]{3,24}", storage_account_name(cluster, scope))
    assert re.fullmatch(r"[a-zA-Z0-9]{5,50}", registry_name(cluster, scope))
    # stable for one stack, different between stacks
    assert storage_account_name(cluster, scope) == storage_account_name(cluster, scope)
    assert storage_account_name(cluster, scope) != storage_account_name(cluster, scope + "x")


@pytest.mark.parametrize("share", ["a", "ab", "a--b", "team--share"])
def test_config_refuses_share_names_azure_files_cannot_take(share):
    """Names config accepts in general (clusterName rules) that Azure Files refuses."""
    with pytest.raises(ConfigError, match="pasture:shareName: expected an Azure Files share name"):
        parse_config({"platform": "aks", "shareName": share})
    parse_config({"platform": "azure", "shareName": share, "sshPublicKey": SSH_KEY})


def test_config_refuses_a_gpu_model_that_cannot_be_a_node_label():
    pool = {"name": "a100", "vm_size": "Standard_NC24ads_A100_v4", "gpu_model": "A100 80GB"}
    with pytest.raises(ConfigError, match=r"pasture:gpuPools\[0\]\.gpu_model: .*node label"):
        parse_config({"platform": "aks", "gpuPools": [pool]})


@pytest.mark.parametrize("variant", ["aks", "aks_default", "aks_bare"])
def test_every_kubernetes_object_is_valid(variant, request):
    """Each object the stack registers passes kubernetes-validate --strict on 1.30-1.34
    (and has no empty In selector)."""
    built = request.getfixturevalue(variant)
    objects = [
        manifest(r)
        for r in built.mocks.resources
        if r.typ.startswith("kubernetes:") and "/" in r.typ and "helm.sh" not in r.typ
    ]
    assert len(objects) >= 14
    for obj in objects:
        validate(obj)
