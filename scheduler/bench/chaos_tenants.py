"""Chaos, the cross-tenant round: one tenant attacks another where tasks run and through
the API (issue 25 item 1, issue 32).

:func:`cross_tenant_reads` starts a one-node process-mode dev cluster of its own with the
real API (two VCs: ``default`` for the attacker alice, ``research`` for the victim bob;
run as root, each VC's tasks run as its own Unix user) and bob's job (ssh, a secret in
its environment, in its log and in a file of its job directory). Then:

- **as a task**: alice's task is told every path of bob's (job directory file, log, the
  node's copy of bob's ssh key and sshd config), lists the share's jobs and the agent's
  task directories, reads every ``/proc/<pid>/environ`` and ``cmdline`` of the node, and
  tries ssh into bob's sshd with every key it found; it writes every byte it read to its
  own job directory, which the bench searches for bob's secrets;
- **through the API**: alice's tasks plant links (symbolic, hard, ``..``), a FIFO and a
  log directory swapped for a link where the API reads logs; where the kernel refuses a
  task that (tenant users), the bench plants them itself, as a tenant with write access
  to the share would; alice's token asks for every planted name and through ``..`` paths.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from scheduler import dev
from scheduler.jobref import job_key

ATTACK = r"""set -u
# the task's own log directory: <job dir>/logs/<uid>/ (scheduler/logpaths.py)
L=$(ls -d "$PASTURE_JOB_DIR"/logs/*/ | head -1); L=${{L%/}}; S="$PASTURE_SHARE_DIR"
i=0
for f in "$S"/jobs/*/logs/*/*.log; do
  case "$f" in "$PASTURE_JOB_DIR"/*) continue;; esac
  ln -s "$f" "$L/v$i-0.log"; ln "$f" "$L/hv$i-0.log" 2>/dev/null; i=$((i+1))
done
ln -s {pw} "$L/pw-0.log"; ln -s {key} "$L/key-0.log"; ln {key} "$L/hkey-0.log"
ln -s ../../../../{key_rel} "$L/rel-0.log"
mkfifo "$L/fifo-0.log"
"""
SWAP_DIR = r"""set -u
sleep 1; V=$(ls -d "$PASTURE_SHARE_DIR"/jobs/*/logs/*/ | grep -v "^$PASTURE_JOB_DIR/" | head -1)
O=$(ls -d "$PASTURE_JOB_DIR"/logs/*/ | head -1); O=${O%/}
mv "$O" "$O.real" && ln -s "${V%/}" "$O"
"""
PLANTED = 'touch "$PASTURE_JOB_DIR/planted"; sleep 120\n'
"""How an attacking task ends: it says it is done, then stays (its job directory with it)."""

VICTIM = job_key("research", "victim")
"""bob's job's key: its directory on the share, its store records (scheduler/jobref.py)."""

PROBE = r"""set -u
# alice's task against bob's job: every byte it reads goes to $O, each try is counted
O="$PASTURE_JOB_DIR/loot"; : > "$O"; n=0; W=$(dirname "$PASTURE_LEASE_FILE")
for f in {paths} "$PASTURE_SHARE_DIR"/jobs/*/* "$PASTURE_SHARE_DIR"/jobs/*/logs/*/* \
    "$W"/tasks/*/ssh/*; do
  n=$((n+1)); cat "$f" >> "$O" 2>/dev/null
done
n=$((n+1)); ls -A "$PASTURE_SHARE_DIR/jobs" "$W/tasks" >> "$O" 2>/dev/null
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  n=$((n+1)); cat "$f" >> "$O" 2>/dev/null
done
K="$PASTURE_JOB_DIR/k"; S="ssh -p {port} -o BatchMode=yes -o StrictHostKeyChecking=no"
S="$S -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 -o IdentitiesOnly=yes"
for k in {keys} "$W"/tasks/*/ssh/id_job; do
  n=$((n+1))
  cat "$k" > "$K" 2>/dev/null && chmod 600 "$K" && for u in {users}; do
    $S -i "$K" "$u@{address}" 'cat "$PASTURE_JOB_DIR"/victim.txt; env' >> "$O" 2>/dev/null
  done
done
for u in {users}; do n=$((n+1)); $S "$u@{address}" env >> "$O" 2>/dev/null; done
echo "$n" > "$PASTURE_JOB_DIR/tried"
touch "$PASTURE_JOB_DIR/probed"; sleep 120
"""
"""The cross-tenant round's task (alice's): every read of bob's it can think of."""


def cross_tenant_reads(directory: Path, timeout_s: float = 90.0) -> dict[str, Any]:
    """Tasks of one tenant plant links to another tenant's log and to the cluster's keys
    in their own log directories; that tenant's token then asks the API (a real uvicorn
    process) for every planted name, through ``..`` paths and a log directory replaced by
    a link. Returns ``{"cross_tenant_reads": responses that carried another tenant's log
    or a key, "cross_tenant_attempts": requests made, "cross_tenant_5xx": server errors, hung or
    broken answers, "cross_tenant_planted": links, hard links and FIFOs planted where the
    API reads, "cross_tenant_planted_by_tasks": those the tasks themselves could plant,
    "cross_tenant_task_reads" / "cross_tenant_task_tries": secrets of another tenant (or
    the cluster's) that a task read through the share, links, ssh and ``/proc``, and the
    reads it tried (:func:`probe_as_task`)}``.

    A one-node dev cluster of its own in ``directory`` (two VCs: ``default`` for the
    attacker, ``research`` for the victim), stopped on return.
    """
    import secrets as _secrets

    import httpx

    from scheduler.store.tokens import TokenStore

    vcs = [
        {"name": "default", "guarantee": {"cpu": 1, "memory": "1Gi"}},
        {"name": "research", "guarantee": {"cpu": 1, "memory": "1Gi"}},
    ]
    from scheduler import tenants

    cluster = dev.up(
        nodes=1,
        cpu_per_node=4,
        memory_per_node="4Gi",
        virtual_clusters=vcs,
        directory=directory,
        # the round's tasks run only sh and ssh: tenant users wherever root can make them
        task_users="vc" if tenants.can_switch() else None,
    )
    try:
        base, share = Path(cluster.base_dir), Path(cluster.share_dir)
        key = base / "secrets.key"
        secrets_seen = {
            "victim": f"VICTIM-{_secrets.token_hex(8)}",
            "env": f"VICTIMENV-{_secrets.token_hex(8)}",
            "key": key.read_text().strip(),
            "redis": Path(cluster.redis_password_file).read_text().strip(),
        }
        store = cluster.store()
        tokens = TokenStore(store.r)
        alice = tokens.create("alice", "user", ["default"])
        bob = tokens.create("bob", "user", ["research"])
        if alice is None or bob is None:
            raise RuntimeError("a fresh dev cluster already had a token named alice or bob")
        api = {
            "alice": httpx.Client(base_url=cluster.endpoint, timeout=30, headers=_bearer(alice)),
            "bob": httpx.Client(base_url=cluster.endpoint, timeout=30, headers=_bearer(bob)),
        }

        def submit(who: str, name: str, vc: str, command: str, **extra: Any) -> None:
            doc = {"name": name, "vc": vc, "roles": {"w": {"command": command}}, **extra}
            r = api[who].post("/api/v1/jobs", json=doc)
            if r.status_code != 201:
                raise RuntimeError(f"submit {name} answered {r.status_code}: {r.text[:300]}")

        victim = secrets_seen["victim"]
        submit(
            "bob", "victim", "research",
            f'echo {victim} > "$PASTURE_JOB_DIR/victim.txt"; echo {victim}; sleep 120',
            ssh=True, env={"VICTIM_ENV": secrets_seen["env"]},
        )  # fmt: skip
        _until(lambda: victim in _all_logs(share), timeout_s, "victim's log")
        task_reads = probe_as_task(cluster, submit, secrets_seen, timeout_s)
        key_rel = key.relative_to(base)  # from jobs/<job>/logs/<uid>/, ../../../../ is the share
        attack = ATTACK.format(pw=cluster.redis_password_file, key=key, key_rel=key_rel)
        submit("alice", "attack-files", "default", attack + PLANTED)
        submit("alice", "attack-dir", "default", SWAP_DIR + PLANTED)
        _until(lambda: len(list(share.glob("jobs/*/planted"))) >= 2, timeout_s, "links planted")
        by_tasks = len(_planted(share))
        # where the kernel refused the tasks (tenant users), plant as a tenant with write
        # access to the share would (SMB without owners, task_users: agent): the API's
        # own defences are what this round measures
        for job, script in (("attack-files", attack), ("attack-dir", SWAP_DIR)):
            env = {"PASTURE_JOB_DIR": str(share / "jobs" / job), "PASTURE_SHARE_DIR": str(share)}
            subprocess.run(
                ["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin", **env},
                capture_output=True, timeout=30, check=False,
            )  # fmt: skip
        # what the attack really planted where the API reads (so 0 reads means refused)
        planted = _planted(share)

        asks: list[tuple[str, dict[str, Any]]] = []
        roles = ["w", "pw", "key", "hkey", "rel", "fifo"] + [
            f"{p}{i}" for p in ("v", "hv") for i in range(3)
        ]
        for role in roles:
            asks.append(("/api/v1/jobs/attack-files/logs", {"role": role, "index": 0}))
            asks.append(("/api/v1/jobs/attack-files/logs", {"role": role, "tail": 5}))
        asks += [
            ("/api/v1/jobs/attack-files/logs/files", {}),
            ("/api/v1/jobs/attack-dir/logs", {"role": "w", "index": 0}),
            ("/api/v1/jobs/attack-dir/logs", {}),
            ("/api/v1/jobs/attack-dir/logs/files", {}),
            ("/api/v1/jobs/attack-files/logs", {"role": f"../../{VICTIM}/logs/w", "index": 0}),
            ("/api/v1/jobs/attack-files/logs", {"role": "..", "index": 0}),
            (f"/api/v1/jobs/..%2F{VICTIM}/logs", {"role": "w", "index": 0}),
            (f"/api/v1/jobs/attack-files%2F..%2F..%2F{VICTIM}/logs", {"role": "w"}),
            ("/api/v1/jobs/victim/logs", {"role": "w", "index": 0}),
            (f"/api/v1/jobs/{VICTIM}/logs", {"role": "w", "index": 0}),
            ("/api/v1/jobs/victim/logs", {"role": "w", "index": 0, "vc": "research"}),
        ]
        reads = errors = 0
        for path, params in asks:
            try:
                r = api["alice"].get(path, params=params, timeout=5)
            except httpx.HTTPError:  # a hung or broken answer (a FIFO once blocked a read)
                errors += 1
                continue
            errors += r.status_code >= 500
            reads += any(s and s in r.text for s in secrets_seen.values())
        for c in api.values():
            c.close()
        return {
            "cross_tenant_reads": reads,
            "cross_tenant_attempts": len(asks),
            "cross_tenant_5xx": errors,
            "cross_tenant_planted": len(planted),
            "cross_tenant_planted_by_tasks": by_tasks,
            **task_reads,
        }
    finally:
        with contextlib.suppress(KeyError):
            cluster._procs["loop"].signal(signal.SIGKILL)
        dev.down(directory)


def _planted(share: Path) -> list[Path]:
    """Links, hard links and FIFOs where the API reads the attackers' logs."""
    return [
        p
        for p in share.glob("jobs/attack-files/logs/*/*-0.log")
        if p.is_symlink() or not p.is_file() or p.stat().st_nlink > 1
    ] + [p for p in share.glob("jobs/attack-dir/logs/*") if p.is_symlink()]


def probe_as_task(
    cluster: dev.DevCluster, submit: Any, secrets_seen: dict[str, str], timeout_s: float
) -> dict[str, int]:
    """Run :data:`PROBE` as alice's task against bob's running ``victim`` job (ssh) and
    count what it read. Returns ``{"cross_tenant_task_reads": secrets of bob's (his log
    line, his environment value, his ssh key) or the cluster's (Redis password, secrets
    key) found in what the task read, "cross_tenant_task_tries": reads the task tried}``.
    Raises TimeoutError when the victim's sshd or the probe does not come up."""
    import yaml

    from scheduler import tenants

    share, base = Path(cluster.share_dir), Path(cluster.base_dir)
    store = cluster.store()
    job = store.get_job(VICTIM)
    if job is None:
        raise RuntimeError("the victim job is gone")
    key = store.ssh_key(VICTIM, job.uid) or ""
    lines = key.splitlines()
    found = {**secrets_seen, "ssh_key": lines[1] if len(lines) > 2 else ""}  # its first line
    work = Path(yaml.safe_load(Path(cluster.agent_configs[0]).read_text())["work_dir"])
    _until(lambda: bool(list(work.glob(f"tasks/{VICTIM}-*/ssh/id_job"))), timeout_s, "victim ssh")
    task = next(t for t in store.tasks(VICTIM) if t.key == "w-0")
    own = list(work.glob(f"tasks/{VICTIM}-*/ssh"))[0]
    vdir = share / "jobs" / VICTIM
    paths = [
        vdir / "victim.txt",
        *vdir.glob("logs/*/w-0.log"),
        own / "id_job",
        own / "sshd_config",
        base / "secrets.key",
        Path(cluster.redis_password_file),
    ]
    users = sorted({tenants.user_name("research"), "root"})
    probe = PROBE.format(
        paths=" ".join(shlex.quote(str(p)) for p in paths),
        keys=shlex.quote(str(own / "id_job")),
        port=int(task.ports["ssh"]),
        address=shlex.quote(task.address),
        users=" ".join(users),
    )
    submit("alice", "probe", "default", probe)
    _until(lambda: (share / "jobs/probe/probed").exists(), timeout_s, "the probe task")
    loot = (share / "jobs/probe/loot").read_text(errors="replace")
    reads = sum(1 for s in found.values() if s and s in loot)
    tried = int((share / "jobs/probe/tried").read_text().strip() or 0)
    return {"cross_tenant_task_reads": reads, "cross_tenant_task_tries": tried}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _all_logs(share: Path) -> str:
    out = []
    for p in [*share.glob("jobs/*/logs/*.log"), *share.glob("jobs/*/logs/*/*.log")]:
        with contextlib.suppress(OSError):
            out.append(p.read_text(errors="replace"))
    return "\n".join(out)


def _until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)
