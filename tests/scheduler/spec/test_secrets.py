"""Job secrets in specs (scheduler/spec/secrets.py, OpenPAI v2 ``secrets``): values are
split off the spec, references become ``${PASTURE_SECRET_<NAME>}``, and every refusal names
the field without echoing a value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.spec import SpecError, load_job, parse_job
from scheduler.spec.secrets import split_secrets

HERE = Path(__file__).parents[2]
EXAMPLE = HERE / "compat" / "corpus" / "openpai-v2" / "protocol-example.yaml"
VALUE = "s3cr3t-Value"
ONLY = "may appear only in commands"

V2 = f"""
protocolVersion: 2
name: sec
type: job
prerequisites:
  - {{type: dockerimage, name: img, uri: busybox,
     auth: {{username: u, password: "<% $secrets.pw %>", registryuri: r.io}}}}
  - name: setup
    type: script
    uri: x
    plugin: com.microsoft.pai.runtimeplugin.cmd
    callbacks: [{{event: taskStarts, commands: ["login <% $secrets.token %>"]}}]
secrets: {{token: {VALUE}, pw: other-{VALUE}}}
taskRoles:
  main:
    dockerImage: img
    prerequisites: [setup]
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0}}
    commands: ["curl -H 'x' https://u:<% $secrets.token %>@h/"]
deployments:
  - name: d
    taskRoles: {{main: {{preCommands: ["echo <%$secrets.token%>"]}}}}
defaults: {{deployment: d}}
"""


def _errors(text: str) -> list[dict]:
    with pytest.raises(SpecError) as info:
        load_job(text)
    assert VALUE not in json.dumps(info.value.errors) and VALUE not in str(info.value)
    return info.value.errors


def test_the_protocol_example_keeps_names_and_gives_the_values_apart():
    parsed = load_job(EXAMPLE.read_bytes())
    spec = parsed.spec.model_dump(mode="json")
    assert spec["secrets"] == ["docker_password", "github_token"]
    assert parsed.secrets == {"docker_password": "password", "github_token": "cGFzc3dvcmQ="}
    for role in ("worker", "ps_server"):
        cmd = spec["roles"][role]["command"]
        assert "git clone https://MaggieQi:${PASTURE_SECRET_github_token}@github.com/" in cmd
        assert "<%" not in cmd
    dumped = json.dumps(spec) + repr(parsed)  # "password" is also in a name: quoted here
    assert "cGFzc3dvcmQ=" not in dumped and '"password"' not in dumped
    assert "'password'" not in dumped


def test_every_allowed_place_is_substituted_and_no_value_is_in_the_spec():
    parsed = load_job(V2)
    cmd = parsed.spec.roles["main"].command
    assert cmd.count("${PASTURE_SECRET_token}") == 3  # callback, preCommand, command
    assert parsed.secrets == {"token": VALUE, "pw": f"other-{VALUE}"}
    assert VALUE not in parsed.spec.model_dump_json()
    assert any("prerequisites[0].auth" in w for w in parsed.warnings)


@pytest.mark.parametrize(
    ("old", "new", "loc", "says"),
    [
        ("<%$secrets.token%>", "<% $secrets.nope %>", "deployments.main.preCommands", "'nope'"),
        ("name: sec", "name: <% $secrets.token %>", "name", ONLY),
        ("uri: busybox", "uri: <% $secrets.pw %>", "prerequisites[0].uri", ONLY),
        (
            "resourcePerInstance: {cpu: 1,",
            "extraContainerOptions: {shmMB: '<% $secrets.pw %>'}\n"
            "    resourcePerInstance: {cpu: 1,",
            "taskRoles.main.extraContainerOptions.shmMB",
            ONLY,
        ),
        ("type: script", "type: script\n    auth: {password: x}", "prerequisites[1].auth", "only"),
        (f"secrets: {{token: {VALUE},", f"secrets: {{token: [{VALUE}],", "secrets.token", "string"),
        (f"token: {VALUE}", f'token: "a{VALUE}\\nb"', "secrets.token", "one line"),
        (f"token: {VALUE}", f"'bad-name': {VALUE}, token: 1", "secrets.bad-name", "secret name"),
    ],
)
def test_misplaced_undeclared_or_bad_secrets_are_refused_by_name(old, new, loc, says):
    assert old in V2
    (err,) = _errors(V2.replace(old, new, 1))
    assert err["loc"].endswith(loc), err
    assert says in err["msg"], err


def test_a_secrets_section_that_is_not_a_mapping_is_refused_without_echo():
    (err,) = _errors(
        V2.replace(f"secrets: {{token: {VALUE}, pw: other-{VALUE}}}", f"secrets: {VALUE}")
    )
    assert err["loc"] == "secrets"


def test_pasture_spec_secrets_as_mapping_or_names():
    doc = {"name": "p", "roles": {"w": {"command": "echo"}}, "secrets": {"TOKEN": VALUE}}
    parsed = parse_job(doc)
    assert parsed.spec.secrets == ["TOKEN"] and parsed.secrets == {"TOKEN": VALUE}
    names = {**doc, "secrets": ["TOKEN"]}
    with pytest.raises(SpecError) as info:
        parse_job(names)
    assert info.value.errors[0]["loc"] == "secrets.TOKEN"
    assert "--secret NAME=VALUE" in info.value.errors[0]["msg"]
    lenient = parse_job(names, require_secret_values=False)  # the CLI, values to come
    assert lenient.spec.secrets == ["TOKEN"] and lenient.secrets == {}
    # a stored spec (names) parses again as names: resubmit needs the values re-given
    assert split_secrets({"secrets": []}) == ({"secrets": []}, {})


def test_openpai_references_in_a_pasture_spec_are_refused_with_the_pasture_way():
    doc = {"name": "p", "roles": {"w": {"command": "e"}}, "secrets": {"T": VALUE}}
    doc["env"] = {"X": "<% $secrets.T %>"}
    with pytest.raises(SpecError) as info:
        parse_job(doc)
    (err,) = info.value.errors
    assert err["loc"] == "env.X" and '"$PASTURE_SECRET_T"' in err["msg"]
    assert VALUE not in str(info.value)


def test_too_many_secrets_are_refused():
    doc = {"name": "p", "roles": {"w": {"command": "e"}}}
    doc["secrets"] = {f"S{i}": "v" for i in range(65)}
    with pytest.raises(SpecError) as info:
        parse_job(doc)
    assert info.value.errors[0]["loc"] == "secrets" and "at most 64" in str(info.value)
