"""Tenancy where Kubernetes task pods run (issue 32): a pod mounts only its own parts of
the share as ``subPath``s of the claim (its job's directory, its code dir and declared
data read-only, its VC's team directory), never the claim's root, and runs as its VC's
uid without privilege escalation. Pods are built from the agent's real start-up
(:func:`scheduler.agent.startup.prepare`), created by the real kubernetes executor in
:class:`tests.k8s_standin.KubeStandIn`, and read back as the kubelet would mount them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes import client as k8s

from scheduler import jobkey, tenants
from scheduler.agent import startup
from scheduler.agent.executor import ExecutorError, TaskLaunch, task_id
from scheduler.agent.k8s_mounts import share_sub_path
from scheduler.agent.kubernetes import KubernetesExecutor, PodSettings, build_pod, pod_of
from scheduler.jobref import job_key
from scheduler.spec import parse_job_spec
from scheduler.store import TaskRecord
from tests.k8s_standin import API, KubeStandIn

NODE = "aks-a100-vmss000001"
CLAIM = "pasture-share"


def tenant_launch(share: Path, agent_dir: Path, vc: str, **job: object) -> TaskLaunch:
    """Task main-0 of job ``train`` of VC ``vc`` as the agent launches it with
    ``task_users: vc`` (the VC's planned uid owns its job directory)."""
    spec = parse_job_spec(
        {"name": "train", "vc": vc, "roles": {"main": {"command": "true"}}, **job}
    )
    key = job_key(vc, "train")
    me = TaskRecord("main", 0, 1, NODE, "10.224.0.5", {"main": 20000, "ssh": 20001})
    tid = task_id(key, "main", 0, 1)
    user = tenants.planned(vc)
    boot = startup.prepare(
        job=key,
        user=vc,
        spec=spec,
        tasks=[me],
        me=me,
        node=NODE,
        share=share,
        task_dir=agent_dir / "tasks" / tid,
        task_id=tid,
        executor_kind="kubernetes",
        owner=(user.uid, user.gid),
        ssh_key=jobkey.generate() if job.get("ssh") else "",
    )
    return TaskLaunch(
        task_id=tid,
        job=key,
        role="main",
        index=0,
        attempt=1,
        node=NODE,
        command=boot.command,
        image="train:1",
        env=boot.env,
        cpu_m=1000,
        memory=2**30,
        gpus=[],
        log_path=share / "jobs" / key / "logs" / "main-0.log",
        share_dir=share,
        state_dir=agent_dir / "tasks" / tid,
        mounts=startup.declared_mounts(spec, share) + boot.mounts,
        lease_file=agent_dir / "lease",
        user=user,
    )


@pytest.fixture()
def cluster(tmp_path):
    share, agent_dir = tmp_path / "share", tmp_path / "agent"
    for d in ("code/alice", "datasets/mnist", "scratch/alice", "teams/alice", "code/bob"):
        (share / d).mkdir(parents=True)
    agent_dir.mkdir()
    kube = KubeStandIn()
    kube.add_node(NODE, cpu_m=8000, memory=64 * 2**30)
    executor = KubernetesExecutor(
        settings=PodSettings(share_claim=CLAIM, agent_dir=str(agent_dir), tolerations=()),
        api=kube,
        node_objects=False,
        capacity_wait_s=0,
    )
    return share, agent_dir, kube, executor


def test_a_tenants_pod_mounts_only_its_own_parts_of_the_share(cluster):
    """alice's pod (VC alice) and bob's (VC bob), both jobs named ``train``: alice's
    container binds exactly her job directory, her code dir and declared data read-only,
    her writable scratch and her VC's team directory; no mount is the claim's root and none
    reaches bob's job directory (on main: the whole claim at the share's path). The
    documented paths keep working within those rights: ``PASTURE_SHARE_DIR`` and
    ``PASTURE_JOB_DIR`` name the share and the mounted job directory, a Volcano claim is
    its directory of the job."""
    share, agent_dir, kube, executor = cluster
    alice = tenant_launch(
        share,
        agent_dir,
        "alice",
        code_dir="code/alice",
        mounts=[
            {"source": "datasets/mnist", "target": "/data"},
            {"source": "scratch/alice", "target": "/scratch", "read_only": False},
        ],
        volumes=[{"name": "ckpt", "target": "/ckpt"}],  # a Volcano volumeClaim
    )
    bob = tenant_launch(share, agent_dir, "bob", code_dir="code/bob")
    handles = [executor.start(alice), executor.start(bob)]
    assert kube.running() == sorted(pod_of(h)[1] for h in handles)

    view = kube.container_view(pod_of(handles[0])[1], {CLAIM: str(share)})
    from_share = {p: v for p, v in view.items() if v[0] and v[0].startswith(str(share))}
    s = str(share)
    assert from_share == {
        f"{s}/jobs/train.alice": (f"{s}/jobs/train.alice", False),
        f"{s}/code/alice": (f"{s}/code/alice", True),
        "/data": (f"{s}/datasets/mnist", True),
        "/scratch": (f"{s}/scratch/alice", False),
        f"{s}/teams/alice": (f"{s}/teams/alice", False),
        "/ckpt": (f"{s}/jobs/train.alice/volumes/ckpt", False),
    }
    env = {
        e["name"]: e.get("value")
        for e in kube.pods[("pasture", pod_of(handles[0])[1])]["spec"]["containers"][0]["env"]
    }
    assert env["PASTURE_SHARE_DIR"] == s and env["PASTURE_JOB_DIR"] == f"{s}/jobs/train.alice"
    bob_dir = share / "jobs" / "train.bob"
    assert bob_dir.is_dir()
    for path, _ in from_share.values():
        assert path is not None
        assert Path(path) != share
        assert not bob_dir.is_relative_to(path) and not Path(path).is_relative_to(bob_dir)
    wire = kube.pods[("pasture", pod_of(handles[0])[1])]
    (task,) = wire["spec"]["containers"]
    subs = sorted(m.get("subPath") for m in task["volumeMounts"] if m["name"] == CLAIM)
    assert subs == [
        "code/alice",
        "datasets/mnist",
        "jobs/train.alice",
        "jobs/train.alice/volumes/ckpt",
        "scratch/alice",
        "teams/alice",
    ]
    bob_subs = {
        m.get("subPath")
        for m in kube.pods[("pasture", pod_of(handles[1])[1])]["spec"]["containers"][0][
            "volumeMounts"
        ]
        if m["name"] == CLAIM
    }
    assert bob_subs == {"jobs/train.bob", "code/bob"}  # VC bob has no team directory


def test_a_tenants_pod_runs_as_its_vcs_uid_without_privileges(cluster):
    """runAsUser/runAsGroup/fsGroup are VC alice's planned uid/gid, runAsNonRoot, no
    privilege escalation, no capabilities; the fence sidecar keeps only KILL; the task's
    passwd names its uid (sshd and ssh look it up) and its home is an emptyDir."""
    share, agent_dir, kube, executor = cluster
    launch = tenant_launch(share, agent_dir, "alice", ssh=True)
    uid = tenants.uid_of("alice")
    assert uid >= tenants.UID_BASE
    name = pod_of(executor.start(launch))[1]
    spec = kube.pods[("pasture", name)]["spec"]
    assert spec["securityContext"] == {
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (task,) = spec["containers"]
    assert task["securityContext"] == {
        "runAsUser": uid,
        "runAsGroup": uid,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    (fence,) = spec["initContainers"]
    assert fence["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["KILL"]}
    assert fence["securityContext"]["allowPrivilegeEscalation"] is False
    assert fence["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in task["env"]}
    assert env["HOME"] == "/home/pasture"
    view = kube.container_view(name, {CLAIM: str(share)})
    assert view["/home/pasture"] == (None, False)  # an emptyDir
    passwd, read_only = view["/etc/passwd"]
    assert read_only and passwd == str(launch.state_dir / "passwd")
    line = f"{tenants.user_name('alice')}:x:{uid}:{uid}:pasture tenant:/home/pasture:/bin/sh"
    assert line in Path(passwd).read_text().splitlines()
    ssh_dir, _ = view["/run/pasture/ssh"]  # the job's key, the tenant's own (0700)
    assert ssh_dir is not None and os.stat(ssh_dir).st_uid == uid
    assert os.stat(share / "jobs" / "train.alice").st_uid == uid


def test_a_pod_of_task_users_agent_keeps_the_images_user():
    launch = TaskLaunch(
        task_id="t-main-0-a1",
        job="t",
        role="main",
        index=0,
        attempt=1,
        node=NODE,
        command="true",
        image="x",
        env={},
        cpu_m=100,
        memory=2**20,
        gpus=[],
        log_path=Path("/mnt/pasture/jobs/t/logs/main-0.log"),
        share_dir=Path("/mnt/pasture"),
        state_dir=Path("/var/lib/pasture/tasks/t"),
    )
    wire = API.sanitize_for_serialization(build_pod(launch, PodSettings(tolerations=())))
    assert "securityContext" not in wire["spec"]
    assert "securityContext" not in wire["spec"]["containers"][0]
    assert "HOME" not in {e["name"] for e in wire["spec"]["containers"][0]["env"]}


def test_a_link_planted_on_the_way_or_the_share_root_is_never_a_subpath(cluster, tmp_path):
    """Declared sources are tenant text: a symbolic link in the share (to bob's job
    directory) and the share root (MARO's ``HOST:CONTAINER`` mounts source "") fail the
    start with the mount named; ``..``, absolute paths elsewhere and control characters are
    refused by the check itself."""
    share, agent_dir, kube, executor = cluster
    bob = tenant_launch(share, agent_dir, "bob")
    (share / "datasets" / "ln").symlink_to(share / "jobs" / "train.bob")
    alice = tenant_launch(
        share, agent_dir, "alice", mounts=[{"source": "datasets/ln/logs", "target": "/data"}]
    )
    with pytest.raises(ExecutorError, match=r"mount /data: .*datasets/ln is a symbolic link"):
        executor.start(alice)
    root = tenant_launch(share, agent_dir, "alice", mounts=[{"source": "", "target": "/proj"}])
    with pytest.raises(ExecutorError, match=r"mount /proj: a task pod never mounts the share"):
        executor.start(root)
    assert kube.running() == []
    executor.start(bob)
    for source, why in (
        (f"{share}/jobs/../jobs/train.bob", "without '..'"),
        ("jobs/train.bob", "without '..'"),  # not absolute
        ("/etc", "not on the cluster share"),
        (f"{share}/jobs/a\nb", "control character"),
    ):
        with pytest.raises(ValueError, match=why):
            share_sub_path(share, source, "mount /x")


def test_the_api_refuses_a_subpath_that_climbs(cluster):
    """The stand-in refuses what the API server refuses, so a pod the executor builds
    wrong fails at create, as it would on AKS."""
    _, _, kube, _ = cluster
    body = {
        "metadata": {"name": "p"},
        "spec": {
            "nodeName": NODE,
            "containers": [
                {
                    "name": "task",
                    "image": "x",
                    "volumeMounts": [{"name": "s", "mountPath": "/d", "subPath": "jobs/../x"}],
                }
            ],
            "volumes": [{"name": "s", "persistentVolumeClaim": {"claimName": CLAIM}}],
        },
    }
    with pytest.raises(k8s.ApiException, match=r"must not contain '\.\.'"):
        kube.create_namespaced_pod("pasture", body)


def test_agents_with_task_users_vc_run_each_vcs_pods_as_its_uid(redis_url, tmp_path):
    """The real loop and agents (``task_users: vc``, kubernetes executor, the share's
    claim) over the stand-in: alice's and bob's jobs, both named ``train``, run as pods of
    their own VC's uid, each mounting only its own job directory of the claim (on main the
    agent refused ``task_users: vc`` with the kubernetes executor)."""
    from scheduler.settings import VirtualClusterSettings
    from tests.scheduler.test_aks_kubelet import Aks

    aks = Aks(redis_url, tmp_path, agent_extra={"task_users": "vc"}, share_claim=CLAIM)
    try:
        guarantee = {"cpu": 512, "memory": "4Ti", "gpu": 32}
        aks.store.apply_vcs(
            [
                VirtualClusterSettings.model_validate({"name": vc, "guarantee": guarantee})
                for vc in ("default", "alice", "bob")
            ]
        )
        aks.submit("train", vc="alice")
        aks.submit("train", vc="bob")
        aks.step(2)
        aks.kube.autoscale()
        aks.step(3)
        pods = aks.task_pods()
        assert len(pods) == 2, aks.kube.rejections
        seen = {}
        for name in pods:
            wire = aks.kube.pods[("pasture", name)]
            key = wire["metadata"]["annotations"]["pasture/job"]
            vc = key.split(".")[1]
            (task,) = wire["spec"]["containers"]
            assert wire["spec"]["securityContext"]["runAsUser"] == tenants.uid_of(vc)
            assert task["securityContext"]["allowPrivilegeEscalation"] is False
            subs = {m.get("subPath") for m in task["volumeMounts"] if m["name"] == CLAIM}
            seen[key] = subs
        assert seen == {"train.alice": {"jobs/train.alice"}, "train.bob": {"jobs/train.bob"}}
        assert tenants.uid_of("alice") != tenants.uid_of("bob")
    finally:
        aks.close()
