"""Stack config: Pulumi.yaml declares every key with a description and the program's
default; sample stack files validate; bad values name the key; the object is frozen."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic.alias_generators import to_snake

from stacks.config import CONFIG_KEYS, SECRET_KEYS, ConfigError, StackConfig, parse_config

pytestmark = pytest.mark.stacks

REPO = Path(__file__).resolve().parents[2]
PROJECT = yaml.safe_load((REPO / "Pulumi.yaml").read_text())


def test_project_file_runs_the_stacks_directory():
    assert PROJECT["name"] == "pasture"
    assert PROJECT["main"] == "stacks/"
    assert PROJECT["runtime"]["name"] == "python"
    assert (REPO / "stacks" / "__main__.py").is_file()


def test_every_key_is_declared_with_description_and_the_programs_default():
    declared = PROJECT["config"]
    # secrets are not declared: a declared key without default is required in every stack
    assert set(declared) == set(CONFIG_KEYS)
    header = (REPO / "Pulumi.yaml").read_text().split("\nconfig:")[0]
    defaults = StackConfig.model_construct().model_dump(mode="json", by_alias=False)
    for key in CONFIG_KEYS:
        spec = declared[key]
        assert spec.get("description"), f"{key} has no description"
        assert "default" in spec, f"{key} has no default"
        expected = defaults[to_snake(key)]
        got = spec["default"]
        if key == "master":
            assert got == {} and expected is None  # {} = not set
            continue
        if key in ("nodePools", "gpuPools", "image", "systemPool"):
            got = StackConfig.model_validate({"platform": "aks", key: got}).model_dump(mode="json")[
                to_snake(key)
            ]
        assert got == expected, f"{key}: Pulumi.yaml default {got!r} != program {expected!r}"
    for key in SECRET_KEYS:
        assert key in header, f"secret {key} is not described in Pulumi.yaml's header"
    for key, spec in declared.items():
        if spec.get("type") == "array":
            assert "items" in spec, f"{key}: Pulumi requires `items` for arrays"


@pytest.mark.parametrize("stack", ["azure-dev", "aks-dev", "onprem-lab"])
def test_sample_stack_files_validate(stack):
    """Valid once the user put their own ``allowedCidrs`` in place of the sample's
    documentation range (see the next test)."""
    doc = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())
    raw = {k.removeprefix("pasture:"): v for k, v in doc["config"].items()}
    if "allowedCidrs" in raw:
        raw["allowedCidrs"] = ["20.61.0.0/24"]
    cfg = parse_config(raw)
    assert cfg.platform == {"azure-dev": "azure", "aks-dev": "aks", "onprem-lab": "onprem"}[stack]
    assert "0.0.0.0/0" not in cfg.allowed_cidrs


@pytest.mark.parametrize("stack", ["azure-dev", "aks-dev"])
def test_sample_stacks_make_the_user_set_allowed_cidrs(stack):
    """Issue 35 item 9: the samples' documentation range reached authorizedIPRanges and
    nobody could reach the cluster; it is refused with the key and the command to set it."""
    doc = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())
    raw = {k.removeprefix("pasture:"): v for k, v in doc["config"].items()}
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value).startswith("pasture:allowedCidrs: 203.0.113.0/24 lies in")
    assert "pulumi config set --path 'pasture:allowedCidrs[0]'" in str(err.value)


@pytest.mark.parametrize(
    "cidr", ["192.0.2.0/24", "198.51.100.7/32", "203.0.113.128/25", "2001:db8:1::/48"]
)
def test_documentation_ranges_are_refused_naming_the_key(cidr):
    with pytest.raises(ConfigError, match=r"^pasture:allowedCidrs: .* documentation range"):
        parse_config({"platform": "aks", "allowedCidrs": ["20.61.0.0/24", cidr]})
    assert parse_config({"platform": "aks", "allowedCidrs": ["0.0.0.0/0"]}).allowed_cidrs


def test_config_is_frozen():
    cfg = parse_config({"platform": "aks"})
    with pytest.raises(ValueError):
        cfg.api_port = 1


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"platform": "gcp"}, "pasture:platform"),
        (
            {
                "platform": "aks",
                "gpuPools": '[{"name": "gpu", "vm_size": "x", "min_count": 3, "max_count": 2}]',
            },
            "pasture:gpuPools[0]",
        ),
        (
            {"platform": "aks", "gpuPools": '[{"name": "GPU_POOL", "vm_size": "x"}]'},
            "pasture:gpuPools[0].name",
        ),
        (
            {"platform": "aks", "gpuPools": '[{"name": "gpu", "vm_size": "x", "taints": ["bad"]}]'},
            "pasture:gpuPools[0].taints",
        ),
        ({"platform": "aks", "vnetCidr": "10.0.0.0/33"}, "pasture:vnetCidr"),
        ({"platform": "aks", "nodePools": "[{not json"}, "pasture:nodePools"),
        ({"platform": "onprem"}, "pasture:master"),
        (
            {
                "platform": "onprem",
                "master": '{"name": "m", "address": "10.0.0.1"}',
                "hosts": '[{"name": "m", "address": "10.0.0.2"}]',
            },
            "pasture:hosts",
        ),
        (
            {
                "platform": "onprem",
                "master": '{"name": "m", "address": "10.0.0.1", "password": "x"}',
            },
            "pasture:master.password",
        ),
        ({"platform": "aks", "allowedCidrs": '["0.0.0.0/0", "nonsense"]'}, "pasture:allowedCidrs"),
        ({"platform": "aks", "apiEndpoint": "10.0.0.1:8443"}, "pasture:apiEndpoint"),
        ({"unknownKey": "1"}, "pasture:unknownKey"),
        ({"platform": "aks", "converge": "true"}, "pasture:converge"),
    ],
)
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value).startswith(key) or f"; {key}" in str(err.value), str(err.value)


def test_open_to_the_world_only_when_written():
    assert parse_config({"platform": "aks"}).allowed_cidrs == ()
    cfg = parse_config({"platform": "aks", "allowedCidrs": '["0.0.0.0/0"]'})
    assert cfg.allowed_cidrs == ("0.0.0.0/0",)
