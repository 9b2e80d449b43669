"""Mounts of a kubernetes task pod besides the share: what ``TaskLaunch.mounts`` names.

The agent gives every executor ``(source on the node, target[:ro])`` pairs: the job's
``mounts`` (directories of the share) and, for a job with ssh, the task's node-local ssh
directory (:mod:`scheduler.agent.ssh`, mounted at ``/run/pasture/ssh`` as in containers).
A pod cannot bind-mount a node path the way ``podman run -v`` does, so each becomes a
volume: a ``subPath`` of the share's claim, or a hostPath under the agent's work dir.
Pure; checked as the Kubernetes client's models (no cluster on the test machine).
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import client as k8s

from scheduler.agent.executor import TaskLaunch
from scheduler.agent.startup import CONTAINER_SSH_DIR

SHARE_VOLUME = "pasture-share"


def task_mounts(
    launch: TaskLaunch, share_claim: str | None, agent_dir: str | None, *, host_network: bool
) -> tuple[list[k8s.V1VolumeMount], list[k8s.V1Volume]]:
    """The pod's mounts of ``launch.mounts`` (``(source on the node, target[:ro])``).

    A source on the share becomes a ``subPath`` of the share's claim (the job's
    ``mounts``); a source under ``agent_dir`` (the node-local ssh directory of a
    task, :mod:`scheduler.agent.ssh`) a hostPath volume ``pasture-mount-<i>``: the agent's
    work dir is a hostPath mounted at the same path in the agent, so the path the agent
    wrote is the node's path.

    Raises:
        ValueError: a source that is neither (names it and the setting to fix), or the
            task's ssh directory on a pod without hostNetwork (the job's ``ssh`` ports are
            node ports that the other tasks reach at the node's address).
    """
    mounts: list[k8s.V1VolumeMount] = []
    volumes: list[k8s.V1Volume] = []
    for i, (source, spec) in enumerate(launch.mounts):
        target, _, mode = spec.partition(":")
        read_only = mode == "ro" or None
        src = Path(source)
        if target == CONTAINER_SSH_DIR and not host_network:
            raise ValueError(
                "ssh between tasks needs hostNetwork task pods (the agent's task_network: "
                "host); this agent's pods use the pod network"
            )
        if share_claim and src.is_relative_to(launch.share_dir):
            rel = src.relative_to(launch.share_dir).as_posix()
            mounts.append(
                k8s.V1VolumeMount(
                    name=SHARE_VOLUME,
                    mount_path=target,
                    sub_path=None if rel == "." else rel,
                    read_only=read_only,
                )
            )
        elif agent_dir and src.is_relative_to(agent_dir):
            name = f"pasture-mount-{i}"
            mounts.append(k8s.V1VolumeMount(name=name, mount_path=target, read_only=read_only))
            volumes.append(
                k8s.V1Volume(
                    name=name,
                    host_path=k8s.V1HostPathVolumeSource(path=str(src), type="Directory"),
                )
            )
        else:
            raise ValueError(
                f"cannot mount {source} into a task pod: it is neither on the cluster share "
                f"({launch.share_dir}, PASTURE_K8S_SHARE_CLAIM) nor under the agent's work "
                f"dir (PASTURE_K8S_AGENT_DIR={agent_dir or 'unset'})"
            )
    return mounts, volumes
