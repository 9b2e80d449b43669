"""The kubernetes executor's fence sidecar (scheduler/agent/kubernetes.py): the generated
manifest, as the Kubernetes client serializes it, and the watchdog's pod mode in a real
PID namespace (``unshare``), since no cluster exists on the test machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from scheduler.agent import watchdog
from scheduler.agent.kubernetes import (
    FENCE_RESOURCES,
    KubernetesExecutor,
    PodSettings,
    build_pod,
    pod_of,
)
from tests.k8s_manifests import validate
from tests.scheduler.agent.test_kubernetes_pods import SETTINGS, launch, round_trip

AGENT_DIR = "/var/lib/pasture"
FENCED = PodSettings(**{**SETTINGS.__dict__, "agent_dir": AGENT_DIR})


def fenced_launch():
    return launch(
        lease_file=Path(AGENT_DIR) / "lease",
        state_dir=Path(AGENT_DIR) / "tasks" / "mnist-ddp-worker-1-a1",
    )


def test_a_pod_with_a_lease_gets_the_fence_sidecar_and_a_shared_pid_namespace():
    wire, pod = round_trip(build_pod(fenced_launch(), FENCED))
    spec = wire["spec"]
    assert spec["shareProcessNamespace"] is True
    [fence] = spec["initContainers"]
    assert fence["restartPolicy"] == "Always"  # a native sidecar: ends with the task
    assert fence["command"] == [
        "python3",
        "-m",
        "scheduler.agent.watchdog",
        "/var/lib/pasture/lease",
        "/var/lib/pasture/tasks/mnist-ddp-worker-1-a1/fenced",
        "--pod",
    ]
    # the pasture image (it has the watchdog), not the task's
    assert fence["image"] == "pastureacr.azurecr.io/pasture:0.1.0"
    assert fence["resources"] == {"limits": FENCE_RESOURCES, "requests": FENCE_RESOURCES}
    assert fence["volumeMounts"] == [{"mountPath": AGENT_DIR, "name": "pasture-agent"}]
    [agent_vol] = [v for v in spec["volumes"] if v["name"] == "pasture-agent"]
    assert agent_vol["hostPath"] == {"path": AGENT_DIR, "type": "Directory"}
    # the task container itself does not see the agent's directory
    [task] = spec["containers"]
    assert all(m["name"] != "pasture-agent" for m in task.get("volumeMounts", []))
    assert pod.spec.init_containers[0].name == "fence"


def test_the_fenced_pod_is_a_valid_kubernetes_object():
    """The wire form passes kubernetes-validate --strict on 1.30-1.34 (native sidecars'
    restartPolicy on init containers is in every one of them)."""
    wire, _ = round_trip(build_pod(fenced_launch(), FENCED))
    validate(wire)


def test_the_fence_image_can_be_set_and_the_settings_come_from_the_environment():
    s = PodSettings.from_env(
        {"PASTURE_K8S_AGENT_DIR": AGENT_DIR, "PASTURE_K8S_FENCE_IMAGE": "acr.io/pasture:2"}
    )
    assert (s.agent_dir, s.fence_image) == (AGENT_DIR, "acr.io/pasture:2")
    wire, _ = round_trip(build_pod(fenced_launch(), s))
    assert wire["spec"]["initContainers"][0]["image"] == "acr.io/pasture:2"
    assert PodSettings.from_env({}).agent_dir is None


def test_no_sidecar_without_an_agent_dir_or_a_lease():
    for settings, task in ((SETTINGS, fenced_launch()), (FENCED, launch())):
        wire, _ = round_trip(build_pod(task, settings))
        assert "initContainers" not in wire["spec"]
        assert "shareProcessNamespace" not in wire["spec"]


def test_a_lease_outside_the_agent_dir_is_refused_by_name():
    task = fenced_launch()
    with pytest.raises(ValueError, match="PASTURE_K8S_AGENT_DIR: the agent's lease file /tmp"):
        build_pod(replace(task, lease_file=Path("/tmp/lease")), FENCED)


class Pods:
    """The two CoreV1Api calls start and poll make, answered from memory."""

    def __init__(self):
        self.pods = {}

    def create_namespaced_pod(self, namespace, pod):
        self.pods[(namespace, pod.metadata.name)] = pod

    def read_namespaced_pod(self, name, namespace):
        return self.pods[(namespace, name)]

    def delete_namespaced_pod(self, name, namespace, grace_period_seconds=None):
        self.pods.pop((namespace, name), None)


def test_the_handle_names_the_fenced_file_and_fenced_reads_it(tmp_path):
    api = Pods()
    ex = KubernetesExecutor(settings=replace(FENCED, agent_dir=str(tmp_path)), api=api)
    task = launch(lease_file=tmp_path / "lease", state_dir=tmp_path / "tasks" / "t")
    handle = ex.start(task)
    assert pod_of(handle) == ("pasture", "task-mnist-ddp-worker-1-a1")
    assert handle.endswith(f"#{tmp_path / 'tasks' / 't' / 'fenced'}")
    assert not ex.fenced(handle)
    (tmp_path / "tasks" / "t").mkdir(parents=True)
    (tmp_path / "tasks" / "t" / "fenced").write_text("lease expired\n")
    assert ex.fenced(handle)
    ex.cleanup(handle)
    assert not (tmp_path / "tasks" / "t" / "fenced").exists() and not api.pods
    plain = KubernetesExecutor(settings=SETTINGS, api=Pods()).start(launch())
    assert "#" not in plain  # pods without a sidecar keep the old handle


def test_pod_mode_refuses_the_machines_initial_pid_namespace():
    # checked in-process: running it here would be kill(-1) on the whole machine if the
    # guard were broken
    if os.stat("/proc/self/ns/pid").st_ino != watchdog.INITIAL_PID_NS_INO:
        pytest.skip("the tests themselves run in a PID namespace")
    assert watchdog.in_initial_pid_namespace()


@pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare"
)
def test_pod_mode_kills_the_pods_other_processes_when_the_lease_expires(tmp_path):
    lease, fenced = tmp_path / "lease", tmp_path / "fenced"
    lease.write_text(json.dumps({"deadline": time.monotonic() + 2.0}))
    # a pod in miniature: a new PID namespace whose init is the watchdog, and a "task"
    script = f"sleep 60 & exec {sys.executable} -S "
    script += f"{watchdog.__file__} {lease} {fenced} --pod"
    pod = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-c", script],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not _sleepers(pod.pid):
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.05)
        while not fenced.exists():
            assert time.monotonic() < deadline, "the sidecar never fenced"
            time.sleep(0.1)
        assert "expired" in fenced.read_text()
        deadline = time.monotonic() + 10
        while _sleepers(pod.pid):
            assert time.monotonic() < deadline, "the task's process outlived the lease"
            time.sleep(0.1)
        assert pod.poll() is None  # the sidecar waits for the pod to end (SIGTERM)
    finally:
        os.killpg(pod.pid, 15)
        pod.wait(10)


def _sleepers(root: int) -> list[int]:
    """PIDs of ``sleep`` processes under ``root``."""
    try:
        kids = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    return [p.pid for p in kids if p.name() == "sleep" and p.status() != psutil.STATUS_ZOMBIE]
