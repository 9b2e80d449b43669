"""The ``container`` executor: each task is a podman (or docker) container.

``<cli> run -d --init --pull=never --network host --cpus N --memory M --name task-<id>``
with the share bind-mounted at the same path, the job's mounts (share sub-directories),
GPUs as CDI devices (``--device nvidia.com/gpu=<index>``, inside the container they are
numbered from 0, so CUDA_VISIBLE_DEVICES is ``0..n-1``) and the environment in an env file
(``--env-file``). The container runs ``/bin/sh -c '<command>'`` with stdout/stderr appended
to the task's log in the share. ``--init`` makes SIGTERM reach the command even when it
does not handle signals; ``--pull=never`` because nodes load images explicitly (``pasture
image push``). The container (not the agent) keeps the exit code, so an agent restarted
while tasks run finds them again by name (adoption); ``cleanup`` removes the container.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess

from scheduler.agent.executor import Executor, ExecutorError, TaskLaunch, log_redirect

log = logging.getLogger("pasture.agent")


class ContainerExecutor(Executor):
    """Tasks as containers through the podman / docker CLI.

    Args:
        cli: ``podman`` or ``docker`` (any CLI with the docker run/inspect/stop/rm syntax).
        network: ``host`` (tasks reach each other at the node's address) or a network name.
    """

    kind = "container"

    def __init__(self, cli: str = "podman", network: str = "host") -> None:
        self.cli = cli
        self.network = network

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(
                [self.cli, *args], capture_output=True, text=True, timeout=timeout, check=False
            )
        except FileNotFoundError as exc:
            raise ExecutorError(f"container CLI {self.cli!r} not found on PATH") from exc

    def argv(self, launch: TaskLaunch, env_file: str) -> list[str]:
        """The ``run`` arguments for ``launch`` (after the CLI name)."""
        if not launch.image:
            raise ExecutorError("the container executor needs an image (job or role 'image')")
        share = str(launch.share_dir)
        args = [
            "run",
            "-d",
            "--init",
            "--pull=never",
            "--network",
            self.network,
            "--name",
            f"task-{launch.task_id}",
            "--label",
            f"pasture.task={launch.task_id}",
            "--label",
            f"pasture.job={launch.job}",
            "--cpus",
            f"{launch.cpu_m / 1000:g}",
            "--memory",
            str(launch.memory),
            "--env-file",
            env_file,
            "-v",
            f"{share}:{share}",
            "-w",
            launch.env.get("PASTURE_JOB_DIR", share),
        ]
        for host, target in launch.mounts:
            args += ["-v", f"{host}:{target}"]
        for gpu in launch.gpus:
            args += ["--device", f"nvidia.com/gpu={gpu}"]
        script = f"{log_redirect(launch.log_path)}\n{launch.command}"
        return [*args, launch.image, "/bin/sh", "-c", script]

    def start(self, launch: TaskLaunch) -> str:
        launch.state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(launch.env)
        if launch.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(launch.gpus)))
        env_file = launch.state_dir / "env"
        # 0600 and removed once read: it may hold the job's secrets (scheduler/sealed.py)
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in env.items() if "\n" not in v))
        name = f"task-{launch.task_id}"
        self._run("rm", "-f", name)  # a leftover of a crashed start
        try:
            res = self._run(*self.argv(launch, str(env_file)))
        finally:
            env_file.unlink(missing_ok=True)
        if res.returncode != 0:
            raise ExecutorError(f"{self.cli} run failed: {res.stderr.strip()[-500:]}")
        return json.dumps({"name": name})

    def poll(self, handle: str) -> int | None:
        name = json.loads(handle)["name"]
        res = self._run("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name)
        if res.returncode != 0:
            return -1  # removed behind our back
        status, _, code = res.stdout.strip().partition(" ")
        if status in (
            "running",
            "created",
            "configured",
            "initialized",
            "paused",
            "restarting",
            "stopping",
        ):
            return None
        return int(code or -1)

    def stop(self, handle: str, grace_s: float) -> None:
        name = json.loads(handle)["name"]
        self._run("stop", "-t", str(int(max(0, grace_s))), name, timeout=grace_s + 60)

    def kill(self, handle: str) -> None:
        """SIGKILL the container now (fencing), bounded by :attr:`kill_bound_s`."""
        name = json.loads(handle)["name"]
        try:
            self._run("kill", "--signal", "KILL", name, timeout=self.kill_bound_s)
        except subprocess.TimeoutExpired:
            log.warning("%s kill %s did not return within %g s", self.cli, name, self.kill_bound_s)

    def evidence(self, handle: str) -> dict:
        """``{"oom_killed": bool}``: the cgroup's OOM killer ended the container, by
        ``inspect .State.OOMKilled`` or, when the runtime did not notice (podman with runc
        on cgroup v1 reports false), by the kernel's ``oom-kill:... oom_memcg=...<id>``
        line for this container's cgroup (:func:`kernel_oom_killed`). ``{}`` when the
        container is gone."""
        name = json.loads(handle)["name"]
        res = self._run("inspect", "--format", "{{.State.OOMKilled}} {{.Id}}", name)
        if res.returncode != 0:
            return {}
        flag, _, cid = res.stdout.strip().partition(" ")
        return {"oom_killed": flag.lower() == "true" or kernel_oom_killed(cid)}

    def cleanup(self, handle: str) -> None:
        self._run("rm", "-f", json.loads(handle)["name"])


def kernel_oom_killed(container_id: str) -> bool:
    """Whether the kernel log (``dmesg``; root or ``kernel.dmesg_restrict=0``) has an
    ``oom-kill:`` line whose ``oom_memcg`` is this container's cgroup (its path ends in
    ``libpod-<id>``, ``docker-<id>`` or ``docker/<id>``). False when unreadable."""
    if not re.fullmatch(r"[0-9a-f]{12,64}", container_id or ""):
        return False
    try:
        out = subprocess.run(
            ["dmesg"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    rx = re.compile(r"oom-kill:.*\boom_memcg=\S*" + container_id)
    return any(rx.search(line) for line in out.splitlines()[-5000:])
