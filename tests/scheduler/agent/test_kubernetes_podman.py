"""The kubernetes executor's pods run as the kubelet would run them, with podman (no cluster
on the test machine): two task pods of an ssh job, built by :func:`build_pod` from the
agent's real start-up, each run as a container with the pod's command, env (secretKeyRef
resolved from the Secret the executor builds, as the kubelet does), volumes (share PVC ->
the share directory, hostPath -> the node path) and the host network. The second task
reaches the first over ssh by its alias, through the sshd the pod's script started on the
first task's ``ssh`` port, and gets its secret from the Secret."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client as k8s

from scheduler import jobkey, tenants
from scheduler.agent import startup
from scheduler.agent.k8s_pod import PASSWD_FILE, passwd_text
from scheduler.agent.k8s_secrets import build_secret
from scheduler.agent.kubernetes import PodSettings, build_pod
from scheduler.jobref import job_key
from scheduler.spec import parse_job_spec
from scheduler.store import TaskRecord
from tests.scheduler.agent.test_kubernetes_pods import launch

IMAGE = "localhost/pasture-base:bookworm"
TOKEN = "k8s-podman-s3cr3t"

pytestmark = [
    pytest.mark.skipif(
        shutil.which("podman") is None
        or subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode != 0,
        reason=f"podman or {IMAGE} missing (scripts build the base image)",
    ),
    pytest.mark.xdist_group("podman"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def podman_args(pod: k8s.V1Pod, secret: k8s.V1Secret | None, share: Path) -> list[str]:
    """``podman run`` arguments of the pod's task container, as the kubelet runs it."""
    spec = pod.spec
    (c,) = spec.containers
    volumes = {v.name: v for v in spec.volumes or []}
    args = ["--network", "host" if spec.host_network else "bridge"]
    for m in c.volume_mounts or []:
        v = volumes[m.name]
        if v.empty_dir is not None:  # fresh and the pod's own (fsGroup-writable)
            args += ["--tmpfs", f"{m.mount_path}:rw,mode=1777"]
            continue
        src = share if v.persistent_volume_claim else Path(v.host_path.path)
        if m.sub_path:
            src = src / m.sub_path
        args += ["-v", f"{src}:{m.mount_path}{':ro' if m.read_only else ''}"]
    sc = c.security_context
    if sc is not None:  # the task's securityContext, as the kubelet hands it to the runtime
        if sc.run_as_user is not None:
            args += ["--user", f"{sc.run_as_user}:{sc.run_as_group}"]
        for cap in sc.capabilities.drop if sc.capabilities else []:
            args += ["--cap-drop", cap]
        if sc.allow_privilege_escalation is False:
            args += ["--security-opt", "no-new-privileges"]
    for e in c.env or []:
        if e.value_from is not None:  # the kubelet reads the key of the referenced Secret
            ref = e.value_from.secret_key_ref
            assert secret is not None and ref.name == secret.metadata.name
            value = base64.b64decode(secret.data[ref.key]).decode()
        else:
            value = e.value
        args += ["-e", f"{e.name}={value}"]
    if c.working_dir:
        args += ["-w", c.working_dir]
    return [*args, c.image, *c.command]


@pytest.mark.parametrize("vc", ["default", "alice"])
def test_two_task_pods_reach_each_other_over_ssh_and_read_their_secret(tmp_path, vc):
    """VC default: pods as the image's user (task_users: agent); VC alice: pods as the
    VC's uid (task_users: vc) with every capability dropped and no privilege escalation:
    the task's own sshd serves the job's key as that uid."""
    share, agent_dir = tmp_path / "share", tmp_path / "agent"
    share.mkdir()
    user = tenants.planned(vc) if vc != "default" else None
    job = job_key(vc, "k8sssh")
    spec = parse_job_spec(
        {
            "name": "k8sssh",
            "vc": vc,
            "ssh": True,
            "roles": {
                "a": {
                    "command": (
                        'id -u >"$PASTURE_JOB_DIR/uid" || exit 12\n'
                        "pasture-ssh-barrier 30 || exit 10\n"
                        'ssh b-0 \'echo "$SSH_CONNECTION"\' > "$PASTURE_JOB_DIR/conn" || exit 11\n'
                        'printf %s "$PASTURE_SECRET_HF_TOKEN" | sha256sum >"$PASTURE_JOB_DIR/sum"\n'
                        'touch "$PASTURE_JOB_DIR/done"'
                    ),
                },
                "b": {
                    "command": (
                        'for i in $(seq 300); do [ -e "$PASTURE_JOB_DIR/done" ] && exit 0;'
                        " sleep 0.1; done; exit 9"
                    ),
                },
            },
        }
    )
    tasks = [
        TaskRecord(r, 0, 1, "n1", "127.0.0.1", {"main": free_port(), "ssh": free_port()})
        for r in ("a", "b")
    ]
    settings = PodSettings(
        namespace="pasture", default_image=IMAGE, agent_dir=str(agent_dir), tolerations=()
    )
    tag = uuid.uuid4().hex[:8]
    key = jobkey.generate()  # the submission's key, as the launch record carries it
    names, procs = [], []
    try:
        for me in reversed(tasks):  # b first: its sshd must be up for a's barrier
            tid = f"{job}-{me.role}-0-a1"
            boot = startup.prepare(
                job=job,
                user="u",
                spec=spec,
                tasks=tasks,
                me=me,
                node="n1",
                share=share,
                task_dir=agent_dir / "tasks" / tid,
                task_id=tid,
                executor_kind="kubernetes",
                ssh_key=key,
                owner=(user.uid, user.gid) if user else None,
            )
            env = {**boot.env, "PASTURE_SECRET_HF_TOKEN": TOKEN}
            task = launch(
                task_id=tid,
                job=job,
                role=me.role,
                index=0,
                command=boot.command,
                env=env,
                image=None,
                gpus=[],
                mounts=boot.mounts,
                share_dir=share,
                state_dir=agent_dir / "tasks" / tid,
                log_path=share / "jobs" / job / "logs" / f"{me.role}-0.log",
                user=user,
            )
            pod = build_pod(task, settings)
            if user is not None:  # what the agent and the executor write before the pod
                (task.state_dir / PASSWD_FILE).write_text(passwd_text(user))
                task.log_path.parent.mkdir(parents=True, exist_ok=True)
                task.log_path.touch()
                os.chown(task.log_path, user.uid, user.gid)
            secret = build_secret(env, pod, "uid")
            name = f"k8s-h-{tag}-{me.role}"
            names.append(name)
            procs.append(
                subprocess.Popen(
                    ["podman", "run", "--rm", "--name", name, *podman_args(pod, secret, share)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        codes = [p.wait(timeout=90) for p in procs]
        errors = [p.stderr.read().decode() if p.stderr else "" for p in procs]
        job_dir = share / "jobs" / job
        logs = {p.name: p.read_text() for p in (job_dir / "logs").rglob("*.log")}
        assert codes == [0, 0], (logs, errors)
        assert (job_dir / "uid").read_text().strip() == str(user.uid if user else 0)
        # a's connection ended at b's sshd, on the port b's discovery environment names
        assert (job_dir / "conn").read_text().split()[3] == str(tasks[1].ports["ssh"])
        assert (job_dir / "sum").read_text().split()[0] == hashlib.sha256(
            TOKEN.encode()
        ).hexdigest()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for name in names:
            subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
