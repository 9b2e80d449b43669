"""End to end on a local podman cluster: site.yml converges idempotently, a ps/worker
training job on the digits data set runs across two nodes through the container executor
and the API over TLS, submitted and judged by `make demo`'s own job script
(scripts/demo-job.sh with scripts/demo_report.py), and losing a node mid-job gets the job
retried on what remains.

Needs root podman (make deps) and about 6-10 minutes on 2 cores; see docs/demo.md.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler import tenants

REPO = Path(__file__).resolve().parents[2]
ACCURACY_RE = re.compile(r"^test accuracy: (\d\.\d+)\s*$", re.M)
TERMINAL = {"succeeded", "failed", "stopped"}


def write_spec(
    tmp: Path,
    name: str,
    cpu: str | None = None,
    memory: str | None = None,
    worker_args: str = "",
    ps_args: str = "",
) -> Path:
    """A copy of examples/jobs/digits-ps-worker.yaml with another name and options."""
    spec = yaml.safe_load((REPO / "examples/jobs/digits-ps-worker.yaml").read_text())
    spec["name"] = name
    for role in spec["roles"].values():
        if cpu:
            role["resources"]["cpu"] = cpu
        if memory:
            role["resources"]["memory"] = memory
    spec["roles"]["ps"]["command"] += f" {ps_args}"
    spec["roles"]["worker"]["command"] += f" {worker_args}"
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def wait_until_terminal(cluster, name: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job = cluster.cli.json("job", "show", name)["job"]
        if job["state"] in TERMINAL or time.monotonic() > deadline:
            return job
        time.sleep(2)


def stop_unless_finished(cluster, name: str) -> None:
    """Stop a job a failed test left behind, so that it frees its nodes for the next test."""
    job = cluster.cli.json("job", "show", name)["job"]
    if job["state"] not in TERMINAL:
        cluster.cli.run("job", "stop", name, "--wait", check=False, timeout=180)


def diagnosis(cluster, name: str) -> str:
    """The job's tasks and events and ps-0's log tail, for assertion messages."""
    show = cluster.cli.run("job", "show", name, check=False).stdout
    log = cluster.cli.run("job", "logs", name, "--role", "ps", "--index", "0", check=False)
    return f"{show}\nps-0 log:\n{(log.stdout or log.stderr)[-2000:]}"


def ps_accuracy(cluster, name: str) -> float:
    log = cluster.cli.run("job", "logs", name, "--role", "ps", "--index", "0").stdout
    found = ACCURACY_RE.findall(log)
    assert found, f"ps-0 reported no test accuracy:\n{log[-3000:]}"
    return float(found[-1])


def test_second_site_run_changes_nothing(cluster):
    runner = cluster.converge()
    changed = [
        f"{e['event_data'].get('host')}: {e['event_data'].get('task')}"
        for e in runner.events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("res", {}).get("changed")
    ]
    assert changed == [], "site.yml is not idempotent; changed on the second run:\n" + "\n".join(
        changed
    )
    assert set(runner.stats["ok"]) >= {"master", "node-1", "node-2"}


def test_demo_job_script_trains_across_two_nodes(cluster):
    """`make demo`'s own job steps (scripts/demo-job.sh: login, submit, follow, and the
    verdict of scripts/demo_report.py) on this cluster: red whenever the demo's report is."""
    name = "digits-e2e"
    env = {
        **cluster.cli.env,
        "PASTURE_DEMO_CLUSTER": cluster.name,
        "PASTURE_DEMO_JOB_NAME": name,
        "PASTURE_DEMO_WAIT": "420",
    }
    try:
        demo = subprocess.run(
            ["bash", "scripts/demo-job.sh"],
            cwd=REPO,
            env=env,
            text=True,
            capture_output=True,
            timeout=600,
        )
        job = cluster.cli.json("job", "show", name)["job"]
    finally:
        stop_unless_finished(cluster, name)
    assert demo.returncode == 0, (
        f"scripts/demo-job.sh exited {demo.returncode}:\n{demo.stdout[-4000:]}\n"
        f"{demo.stderr[-3000:]}\n{diagnosis(cluster, name)}"
    )
    assert re.search(r"^  test accuracy: +0\.9\d\d$", demo.stdout, re.M), demo.stdout[-3000:]
    assert job["state"] == "succeeded", diagnosis(cluster, name)
    nodes = {t["node"] for t in job["tasks"]}
    assert nodes == {"node-1", "node-2"}, f"tasks were placed on {nodes}"
    assert ps_accuracy(cluster, name) >= 0.9
    # The ps wrote its result into the job's directory on the cluster share (on the master).
    settings = subprocess.run(
        ["podman", "exec", cluster.container("master"), "cat", "/etc/pasture/scheduler.yaml"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    share = yaml.safe_load(settings)["share_dir"]
    result = subprocess.run(
        [
            "podman",
            "exec",
            cluster.container("master"),
            "cat",
            f"{share}/jobs/{name}/result.json",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert '"workers": 2' in result.stdout


def _one_task_job(tmp: Path, name: str, vc: str, script: str) -> Path:
    """A one-task job of VC ``vc`` on the examples image running ``script`` with bash."""
    spec = {
        "name": name,
        "vc": vc,
        "image": "localhost/pasture-examples:latest",
        "roles": {
            "main": {
                "replicas": 1,
                "resources": {"cpu": "0.2", "memory": "128Mi"},
                "command": f"bash -c {shlex.quote(script)}",
            }
        },
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _run_one_task_job(cluster, name: str, vc: str, script: str) -> tuple[dict[str, Any], str]:
    """Submit, wait for the end; the job record and its task's log."""
    cluster.cli.run("job", "submit", str(_one_task_job(cluster.tmp, name, vc, script)))
    try:
        job = wait_until_terminal(cluster, name, 180)
    finally:
        stop_unless_finished(cluster, name)
    log = cluster.cli.run("job", "logs", name, "--role", "main", "--index", "0", check=False)
    return job, log.stdout + log.stderr


def test_tasks_run_as_their_vcs_users_and_the_kernel_refuses_another_vcs_job_dir(cluster):
    """task_users: vc on the local cluster (the share is one volume that keeps owners):
    each VC's task runs in a user namespace whose root is its VC's uid on the node
    (scheduler/tenants.py, scheduler/agent/container.py), so what it writes on the share,
    as root or as another id inside, belongs on the node to its VC's uid or to its VC's
    own id range; the two VCs' ranges are disjoint; and the kernel refuses the other VC's
    user (its task's root) the first VC's job directory on the node's share."""
    uid_a, uid_b = tenants.uid_of("default"), tenants.uid_of("research")
    a, log_a = _run_one_task_job(
        cluster,
        "uids-a",
        "default",
        'echo "uid=$(id -u)"; echo "jobdir=$PASTURE_JOB_DIR"; cat /proc/self/uid_map;'
        ' echo secret-of-a > "$PASTURE_JOB_DIR/secret.txt";'
        ' echo by-1000 > "$PASTURE_JOB_DIR/other-id.txt";'
        ' chown 1000:1000 "$PASTURE_JOB_DIR/other-id.txt"',
    )
    assert a["state"] == "succeeded", f"{a}\n{log_a}"
    assert "uid=0" in log_a, log_a  # root of its namespace (Volcano's jobs need it)
    assert re.search(rf"^\s*0\s+{uid_a}\s+65536\s*$", log_a, re.M), log_a
    found = re.search(r"^jobdir=(/\S+)$", log_a, re.M)
    assert found, log_a
    job_dir_a = found.group(1)
    b, log_b = _run_one_task_job(
        cluster,
        "uids-b",
        "research",
        f"cat /proc/self/uid_map; cat {shlex.quote(job_dir_a + '/secret.txt')} || echo refused",
    )
    assert b["state"] == "succeeded", f"{b}\n{log_b}"
    assert re.search(rf"^\s*0\s+{uid_b}\s+65536\s*$", log_b, re.M), log_b
    assert not set(tenants.id_range("default")) & set(tenants.id_range("research"))
    assert "secret-of-a" not in log_b and "refused" in log_b, log_b
    # On the node that ran A (the share as every task's user sees it): the files' owners on
    # the node are A's uid and an id of A's range, and the kernel refuses B's user (its
    # task's root) A's job directory, and gives A's user its own file (the right path).
    node = cluster.container(a["tasks"][0]["node"])
    owners = subprocess.run(
        ["podman", "exec", node, "stat", "-c", "%n %u %g"]
        + [f"{job_dir_a}/{f}" for f in ("secret.txt", "other-id.txt")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    assert owners == [
        f"{job_dir_a}/secret.txt", str(uid_a), str(uid_a),
        f"{job_dir_a}/other-id.txt", str(uid_a + 1000), str(uid_a + 1000),
    ], owners  # fmt: skip

    def cat_as(uid: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "podman",
                "exec",
                node,
                "setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "cat",
                f"{job_dir_a}/secret.txt",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )

    for uid in (uid_b, uid_b + 1000):  # B's task's root, and another id of B's task
        as_b = cat_as(uid)
        assert as_b.returncode != 0 and "Permission denied" in as_b.stderr, as_b
        assert "secret-of-a" not in as_b.stdout
    as_a = cat_as(uid_a)
    assert as_a.returncode == 0 and as_a.stdout.strip() == "secret-of-a", as_a


@pytest.mark.e2e_last  # stops a node of the shared cluster for good
def test_losing_a_node_mid_job_retries_on_the_remaining_node(cluster):
    # Half a core per task: the whole gang fits on one node once the other is gone. Workers
    # sleep 0.1 s per step, so an attempt trains for about 40 s.
    name = "digits-e2e-node-loss"
    spec = write_spec(
        cluster.tmp,
        name,
        cpu="500m",
        memory="384Mi",
        worker_args="--step-delay 0.1",
        ps_args="--steps 400",
    )
    cluster.cli.run("job", "submit", str(spec))
    deadline = time.monotonic() + 300
    while True:  # until training is under way (ps-0 logged a step)
        job = cluster.cli.json("job", "show", name)["job"]
        assert job["state"] not in TERMINAL, f"job ended before the node was stopped: {job}"
        log = cluster.cli.run(
            "job", "logs", name, "--role", "ps", "--index", "0", check=False
        ).stdout
        if job["state"] == "running" and re.search(r"^step +\d+/", log, re.M):
            break
        if time.monotonic() > deadline:
            stop_unless_finished(cluster, name)
            raise AssertionError("training did not start in 300 s:\n" + diagnosis(cluster, name))
        time.sleep(2)
    first = {f"{t['role']}-{t['index']}": t["node"] for t in job["tasks"]}
    victim = first["ps-0"]
    survivor = ({"node-1", "node-2"} - {victim}).pop()
    subprocess.run(
        ["podman", "stop", "--time", "2", cluster.container(victim)],
        check=True,
        capture_output=True,
    )

    job = wait_until_terminal(cluster, name, timeout_s=420)
    stop_unless_finished(cluster, name)
    assert job["state"] == "succeeded", diagnosis(cluster, name)
    assert job["attempt"] >= 2, f"the job was not retried: {job}"
    assert {t["node"] for t in job["tasks"]} == {survivor}, job["tasks"]
    events = cluster.cli.json("job", "show", name)["events"]
    assert any(victim in str(e.get("reason", "")) for e in events), events
    assert ps_accuracy(cluster, name) >= 0.9
    nodes = {n["name"]: n for n in cluster.cli.json("node", "list")}
    assert nodes[victim]["state"] != "ready", nodes[victim]
