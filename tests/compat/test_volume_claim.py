"""Issue 37, seventh point: a Volcano ``volumes[].volumeClaim`` (a new claim per job) is a
fresh share directory of the job, created when a task starts, mounted at the volume's
``mountPath`` in containers and named by ``PASTURE_VOLUME_<NAME>``, and removed when the
loop deletes the finished job unless ``keep``. The file: volcano-sh/website
content/en/docs/vcjob.md (Example), whose first volume has no claim name (Volcano creates
one for the job). Real redis-server, real file system."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from scheduler.agent import startup
from scheduler.loop import Loop
from scheduler.settings import SchedulerSettings
from scheduler.spec import load_job
from scheduler.store import NodeRecord, Store, TaskRecord, TaskState

FILE = Path(__file__).parent / "corpus" / "volcano" / "vcjob-doc-example.yaml"


def _spec():
    (spec,) = load_job(FILE.read_bytes()).specs
    # the example asks for 6 tasks of 1 core, priority high-priority: one small task here
    one = {"replicas": 1, "command": "true", "entrypoint": False}
    role = spec.roles["default-nginx"].model_copy(update=one)
    update = {"roles": {"default-nginx": role}, "min_available": 1, "ssh": False}
    return spec.model_copy(update=update)  # (its ssh plugin needs sshd: not this test)


def test_a_new_claim_is_a_fresh_directory_of_the_job_in_env_and_mounts(tmp_path):
    spec = _spec()
    assert [(v.name, v.target, v.keep) for v in spec.volumes] == [("volume-0", "/myinput", False)]
    share = tmp_path / "share"
    share.mkdir()
    me = TaskRecord("default-nginx", 0, 1, "n1", "127.0.0.1", {})
    boot = startup.prepare(
        job="test-job",
        user="u",
        spec=spec,
        tasks=[me],
        me=me,
        node="n1",
        share=share,
        task_dir=tmp_path / "task",
        task_id="t",
        executor_kind="container",
    )
    path = share / "jobs/test-job/volumes/volume-0"
    assert path.is_dir() and not any(path.iterdir())
    assert boot.env["PASTURE_VOLUME_VOLUME_0"] == str(path)
    assert (str(path), "/myinput") in boot.mounts


def test_a_name_submitted_again_gets_a_fresh_claim_not_the_old_ones_files(tmp_path):
    """alice's job ``x`` is deleted by the API (the claim stays, as ``job delete`` leaves
    the share); bob submits ``x`` again: a new uid, so his task's claim is empty."""
    spec = _spec()
    share = tmp_path / "share"
    share.mkdir()
    me = TaskRecord("default-nginx", 0, 1, "n1", "127.0.0.1", {})
    dirs = []
    for uid in ("a" * 32, "b" * 32):
        boot = startup.prepare(
            job="test-job",
            user="u",
            spec=spec,
            tasks=[me],
            me=me,
            node="n1",
            share=share,
            task_dir=tmp_path / f"task-{uid}",
            task_id="t",
            executor_kind="container",
            job_uid=uid,
        )
        path = Path(boot.env["PASTURE_VOLUME_VOLUME_0"])
        assert path == share / f"jobs/test-job/volumes/{uid}/volume-0"
        assert not any(path.iterdir()), "a new submission's claim starts empty"
        (path / "secret-of-the-first").write_text("alice's data")
        dirs.append(path)
    assert dirs[0] != dirs[1]


@pytest.mark.parametrize("keep", [False, True])
def test_the_directory_goes_with_the_job_unless_kept(redis_url, tmp_path, keep):
    share = tmp_path / "share"
    settings = SchedulerSettings.model_validate(
        {"redis": {"url": redis_url}, "share_dir": str(share), "loop": {"interval_s": 0.1}}
    )
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    store.apply_vcs(settings.virtual_clusters)
    store.register_node(NodeRecord(name="n1", address="n1", cpu_m=4000, memory=16 << 30))
    spec = _spec()
    vols = [v.model_copy(update={"keep": keep}) for v in spec.volumes]
    spec = spec.model_copy(update={"volumes": vols, "ttl_after_finished": 0, "vc": "default"})
    store.create_job(spec, user="ann")
    loop = Loop(store, settings)
    loop.cycle()
    uid = store.get_job("test-job").uid
    path = share / f"jobs/test-job/volumes/{uid}/volume-0"
    path.mkdir(parents=True)  # as the agent's start-up makes it
    (path / "checkpoint").write_text("x")
    for t in store.tasks("test-job"):
        store.report_task("test-job", t.key, t.attempt, t.node, TaskState.SUCCEEDED, 0)
    loop.cycle()
    loop.cycle()
    assert store.get_job("test-job") is None
    assert path.exists() == keep
