"""What a kubernetes task pod mounts: its own parts of the share, never the claim's root.

The agent gives every executor the same mount plan (:func:`scheduler.agent.startup.prepare`
and the agent's declared data): the job's directory (read-write), ``TaskLaunch.mounts`` as
``(source on the node, target[:ro])`` pairs (its code dir read-only, its VC's team
directory when an admin made it, the job's declared ``mounts``, read-only unless declared
``read_only: false``, its Volcano volumes) and, for a job with ssh, the task's node-local
ssh directory (:mod:`scheduler.agent.ssh`, mounted at ``/run/pasture/ssh``). The container
executor binds each with ``-v``; a pod cannot bind-mount a node path, so here each
becomes a volume mount:

- a source on the share -> a ``subPath`` of the share's claim (one volume
  ``pasture-share``), mounted at the target; the job directory at its own path on the
  share, so ``PASTURE_JOB_DIR`` and the log paths are the same in the pod;
- a source under the agent's work dir -> a hostPath volume ``pasture-mount-<i>``.

A ``subPath`` is tenant text (job keys, declared sources), so each is checked before the
pod is built (:func:`share_sub_path`): relative, no ``..`` (Kubernetes refuses both at
validation), not the share root, no control characters, and no symbolic link on the way
from the share root (checked with ``lstat`` on the agent's own share mount: the kubelet
refuses a subPath whose links lead out of the volume, not one that leads to another
tenant's directory inside it). Pure but for that ``lstat``; checked as the Kubernetes
client's models (no cluster on the test machine).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from kubernetes import client as k8s

from scheduler import logpaths
from scheduler.agent.executor import TaskLaunch
from scheduler.agent.startup import CONTAINER_SSH_DIR

SHARE_VOLUME = "pasture-share"


def share_sub_path(share_dir: Path, source: str, what: str) -> str:
    """The ``subPath`` of the share's claim that is ``source`` (a path on the node, under
    ``share_dir``), checked as described in the module docstring.

    Args:
        share_dir: the share's path on the node (``TaskLaunch.share_dir``).
        source: the absolute path on the node to mount.
        what: what the path is, for the error (``"the job directory"``, ``"mount /data"``).

    Returns:
        The share-relative POSIX path, e.g. ``"jobs/train.research"``.

    Raises:
        ValueError: naming ``what``, the path and why: not under the share, the share root,
            ``..`` or a control character in it, or a symbolic link on the way.
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in source):
        raise ValueError(f"{what}: the path {source!r} holds a control character")
    src = PurePosixPath(source)
    if not src.is_absolute() or ".." in src.parts:
        raise ValueError(f"{what}: expected an absolute path without '..', got {source!r}")
    if not src.is_relative_to(share_dir):
        raise ValueError(f"{what}: {source!r} is not on the cluster share {share_dir}")
    rel = src.relative_to(share_dir).as_posix()
    if rel in ("", "."):
        raise ValueError(
            f"{what}: a task pod never mounts the share's root ({share_dir}); name a "
            "directory of the share (mounts: [{source: <dir>, target: ...}])"
        )
    here = Path(share_dir)
    for part in PurePosixPath(rel).parts:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            break  # the kubelet makes a missing subPath a fresh directory: nothing to follow
        if stat.S_ISLNK(mode):
            raise ValueError(
                f"{what}: {here} is a symbolic link; a task pod mounts only real "
                "directories of the share"
            )
    return rel


def task_mounts(
    launch: TaskLaunch, share_claim: str | None, agent_dir: str | None, *, host_network: bool
) -> tuple[list[k8s.V1VolumeMount], list[k8s.V1Volume]]:
    """The task container's volume mounts and the pod's volumes for them.

    With a ``share_claim``: first the job's directory (:func:`scheduler.logpaths.job_dir`)
    read-write at its path on the share, then each of ``launch.mounts`` in order (a
    ``:ro`` target read-only): share sources as ``subPath`` mounts of one claim volume
    :data:`SHARE_VOLUME`; sources under ``agent_dir`` (the task's ssh directory) as hostPath
    volumes ``pasture-mount-<i>`` (the agent's work dir is a hostPath mounted at the same
    path in the agent, so the path the agent wrote is the node's path). Never the claim's
    root. Without a claim, only the hostPath mounts.

    Raises:
        ValueError: a source that is neither (names it and the setting to fix); a subPath
            refused by :func:`share_sub_path`; two mounts at one path (Kubernetes refuses
            the pod); the task's ssh directory on a pod without hostNetwork (the job's
            ``ssh`` ports are node ports that the other tasks reach at the node's address).
    """
    mounts: list[k8s.V1VolumeMount] = []
    volumes: list[k8s.V1Volume] = []
    share = launch.share_dir
    if share_claim:
        job_dir = logpaths.job_dir(share, launch.job)
        rel = share_sub_path(share, str(job_dir), "the job directory")
        mounts.append(k8s.V1VolumeMount(name=SHARE_VOLUME, mount_path=str(job_dir), sub_path=rel))
    for i, (source, spec) in enumerate(launch.mounts):
        target, _, mode = spec.partition(":")
        read_only = mode == "ro" or None
        src = Path(source)
        if target == CONTAINER_SSH_DIR and not host_network:
            raise ValueError(
                "ssh between tasks needs hostNetwork task pods (the agent's task_network: "
                "host); this agent's pods use the pod network"
            )
        if share_claim and src.is_relative_to(share):
            rel = share_sub_path(share, source, f"mount {target}")
            mounts.append(
                k8s.V1VolumeMount(
                    name=SHARE_VOLUME, mount_path=target, sub_path=rel, read_only=read_only
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
                f"({share}, PASTURE_K8S_SHARE_CLAIM) nor under the agent's work "
                f"dir (PASTURE_K8S_AGENT_DIR={agent_dir or 'unset'})"
            )
    seen: dict[str, str] = {}
    for m in mounts:
        path = os.path.normpath(m.mount_path)
        if path in seen:
            raise ValueError(
                f"two mounts at {path} in one task pod ({seen[path]} and "
                f"{m.sub_path or m.name}); give the job's mounts distinct targets"
            )
        seen[path] = m.sub_path or m.name
    if share_claim and any(m.name == SHARE_VOLUME for m in mounts):
        volumes.insert(
            0,
            k8s.V1Volume(
                name=SHARE_VOLUME,
                persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
                    claim_name=share_claim
                ),
            ),
        )
    return mounts, volumes
