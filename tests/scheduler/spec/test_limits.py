"""Caps and checks of the pasture spec: names, env, commands, exit codes, mounts, role
names that collide once mangled into environment variable names."""

from __future__ import annotations

import pytest

from scheduler.spec import SpecError, parse_job_spec


def job(**over) -> dict:
    doc = {"name": "n", "roles": {"w": {"command": "true"}}}
    doc.update(over)
    return doc


def locs_and_msgs(doc: dict) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        parse_job_spec(doc)
    return [(e["loc"], e["msg"]) for e in info.value.errors]


def test_role_name_with_trailing_newline_is_refused():
    ((loc, msg),) = locs_and_msgs(job(roles={"w\n": {"command": "true"}}))
    assert loc == "roles" and "role names are 1 to 63 characters: letters" in msg


def test_job_name_with_trailing_newline_is_refused():
    assert locs_and_msgs(job(name="n\n"))[0][0] == "name"


def test_roles_that_collide_after_env_mangling_are_refused():
    ((loc, msg),) = locs_and_msgs(
        job(roles={"a-b": {"command": "true"}, "a_b": {"command": "true"}})
    )
    assert loc == "roles" and "'a-b' and 'a_b'" in msg


@pytest.mark.parametrize(
    ("mount", "loc"),
    [
        ({"source": "data:/etc", "target": "/data"}, "mounts.0.source"),
        ({"source": "data", "target": "/data,ro"}, "mounts.0.target"),
        ({"source": "data", "target": "/data:/etc"}, "mounts.0.target"),
        ({"source": "da\nta", "target": "/data"}, "mounts.0.source"),
        ({"source": "../etc", "target": "/data"}, "mounts.0.source"),
        ({"source": "data", "target": "/data/../etc"}, "mounts.0.target"),
        ({"source": "data", "target": "data"}, "mounts.0.target"),
    ],
)
def test_mount_paths_are_validated(mount, loc):
    assert locs_and_msgs(job(mounts=[mount]))[0][0] == loc


def test_env_caps():
    too_many = {f"V{i}": "x" for i in range(300)}
    assert "at most 256" in locs_and_msgs(job(env=too_many))[0][1]
    assert "32768" in locs_and_msgs(job(env={"BIG": "x" * 40_000}))[0][1]
    assert locs_and_msgs(job(env={"BAD-NAME": "x"}))[0][0] == "env"
    role_env = {"w": {"command": "true", "env": {"1X": "y"}}}
    assert locs_and_msgs(job(roles=role_env))[0][0] == "roles.w.env"


def test_command_and_exit_code_caps():
    long = {"w": {"command": "x" * 70_000}}
    assert locs_and_msgs(job(roles=long))[0][0] == "roles.w.command"
    many = {"max_attempts": 2, "fail_on_exit_codes": list(range(300))}
    assert locs_and_msgs(job(retry=many))[0][0] == "retry.fail_on_exit_codes"
    assert locs_and_msgs(job(retry={"fail_on_exit_codes": [256]}))[0][0] == (
        "retry.fail_on_exit_codes"
    )


def test_vc_and_image_names_are_checked():
    assert locs_and_msgs(job(vc="a b"))[0][0] == "vc"
    assert locs_and_msgs(job(vc="x\n"))[0][0] == "vc"
    assert locs_and_msgs(job(image="img tag"))[0][0] == "image"


def test_new_fields_validate_their_references():
    roles = {"ps": {"command": "t"}, "w": {"command": "t", "replicas": 2, "depends_on": ["ps"]}}
    spec = parse_job_spec(
        job(
            roles=roles,
            min_available=2,
            min_succeeded=1,
            ttl_after_finished=3600,
            code_dir="code/mnist",
            ssh=True,
            policies={
                "on_events": [{"event": "task_completed", "action": "complete_job", "role": "w"}]
            },
        )
    )
    assert spec.roles["w"].depends_on == ["ps"] and spec.code_dir == "code/mnist"
    cyc = {"a": {"command": "t", "depends_on": ["b"]}, "b": {"command": "t", "depends_on": ["a"]}}
    assert "cycle" in locs_and_msgs(job(roles=cyc))[0][1]
    assert (
        "unknown role"
        in locs_and_msgs(
            job(policies={"on_events": [{"event": "unknown", "action": "fail_job", "role": "x"}]})
        )[0][1]
    )
    assert "exceeds" in locs_and_msgs(job(min_succeeded=5))[0][1]
    assert "write at most 1" in locs_and_msgs(job(min_available=3))[0][1]
    bad_completion = {"w": {"command": "t", "completion": {"min_succeeded": 2}}}
    assert "exceeds replicas" in locs_and_msgs(job(roles=bad_completion))[0][1]
    assert locs_and_msgs(job(code_dir="/abs"))[0][0] == "code_dir"


def test_shm_is_parsed_in_bytes():
    spec = parse_job_spec(job(roles={"w": {"command": "t", "shm": "64Mi"}}))
    assert spec.roles["w"].shm == 64 * 2**20
    again = parse_job_spec(spec.model_dump(mode="json"))
    assert again == spec


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
def test_a_job_may_not_choose_its_gpus_through_the_environment(name):
    """Issue 35 item 7: with the NVIDIA runtime on the node, NVIDIA_VISIBLE_DEVICES=all in
    a task would show it every GPU of its node, other tenants' included; both variables
    are pasture's (and the device plugin's) to set, at job and at role level."""
    ((loc, msg),) = locs_and_msgs(job(env={name: "all"}))
    assert loc == "env" and name in msg and "'all'" in msg
    role_env = {"w": {"command": "true", "env": {name: "0"}}}
    ((loc, msg),) = locs_and_msgs(job(roles=role_env))
    assert loc == "roles.w.env" and name in msg
