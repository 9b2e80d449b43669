"""Azure names of the aks stack for every ``clusterName`` (lengths 1-40, odd characters)
and the checks of the Azure config fields. Azure's rules are written here independently
of stacks/aks/names.py (learn.microsoft.com, resource-name-rules; AKS FAQ for the node
resource group's 80 characters)."""

from __future__ import annotations

import re
import string

import pytest

from stacks.aks.names import (
    check_config,
    node_resource_group_name,
    registry_name,
    storage_account_name,
)
from stacks.config import ConfigError, parse_config

pytestmark = pytest.mark.stacks

SCOPE = "00000000-0000-0000-0000-000000000001/pasture/aks-dev"
# the longest Azure region names (the node resource group carries one)
LOCATIONS = ["westeurope", "australiasoutheast", "germanywestcentral", "southafricanorth"]

# Azure's rules: what each resource accepts, as (regex, min, max)
AZURE = {
    "storage account": (r"[a-z0-9]+", 3, 24),
    "container registry": (r"[a-zA-Z0-9]+", 5, 50),
    "node resource group": (r"[-\w._()]*[-\w_()]", 1, 80),
    "managed cluster (auto-named <clusterName>-aks + 8 random)": (
        r"[a-zA-Z0-9][-_a-zA-Z0-9]*[a-zA-Z0-9]",
        1,
        63,
    ),
    "dns prefix": (r"[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?", 1, 54),
    "resource group (auto-named <clusterName>-rg + 8 random)": (r"[-\w._()]*[-\w_()]", 1, 90),
}


def azure_names(cluster: str, scope: str, location: str) -> dict[str, str]:
    return {
        "storage account": storage_account_name(cluster, scope),
        "container registry": registry_name(cluster, scope),
        "node resource group": node_resource_group_name(cluster, scope, location),
        "managed cluster (auto-named <clusterName>-aks + 8 random)": f"{cluster}-aks1a2b3c4d",
        "dns prefix": cluster,
        "resource group (auto-named <clusterName>-rg + 8 random)": f"{cluster}-rg1a2b3c4d",
    }


def candidates() -> list[str]:
    names = []
    for n in range(1, 41):
        names.append(("abcdefghij" * 4)[:n])  # letters
        names.append(("a1-" * 14)[:n])  # dashes anywhere, maybe at the end
    names += [
        "Aks",
        "aks_dev",
        "aks.dev",
        "1aks",
        "-aks",
        "aks-",
        "aks--dev",
        "aks dev",
        "äks",
        "aks/dev",
        "",
        "a" * 32 + "b",
    ]
    names += [f"a{c}b" for c in string.punctuation]
    return names


@pytest.mark.parametrize("cluster", candidates())
def test_every_accepted_cluster_name_gives_valid_azure_names(cluster):
    try:
        cfg = parse_config({"platform": "aks", "clusterName": cluster})
    except ConfigError as exc:
        assert str(exc).startswith("pasture:clusterName: "), exc  # refused, naming the key
        assert repr(cluster) in str(exc)
        return
    check_config(cfg)
    for location in LOCATIONS:
        for what, name in azure_names(cluster, SCOPE, location).items():
            regex, low, high = AZURE[what]
            assert re.fullmatch(regex, name), f"{what} {name!r} breaks Azure's characters"
            assert low <= len(name) <= high, f"{what} {name!r}: {len(name)} chars"


def test_the_sweep_accepts_names_up_to_32_and_refuses_the_rest():
    accepted = set()
    for cluster in candidates():
        try:
            parse_config({"platform": "aks", "clusterName": cluster})
            accepted.add(cluster)
        except ConfigError:
            pass
    assert "abcdefghij" * 3 + "ab" in accepted  # 32 characters
    assert not any(len(c) > 32 for c in accepted)
    assert not {"Aks", "aks_dev", "aks-", "-aks", "1aks", "", "äks"} & accepted


def test_global_names_differ_between_subscriptions_and_stay_for_one():
    other = "11111111-1111-1111-1111-111111111111/pasture/aks-dev"
    for f in (storage_account_name, registry_name):
        assert f("aks-dev", SCOPE) == f("aks-dev", SCOPE)  # stable across updates
        assert f("aks-dev", SCOPE) != f("aks-dev", other)  # another user's sample stack
    assert node_resource_group_name("aks-dev", SCOPE, "westeurope").startswith("MC_aks-dev_")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("kubernetesVersion", "1.29", "pasture:kubernetesVersion: expected"),
        ("kubernetesVersion", "abc", "pasture:kubernetesVersion: expected"),
        ("kubernetesVersion", "1.30.x", "pasture:kubernetesVersion: expected"),
        ("location", "West Europe", "pasture:location: expected an Azure region name"),
        ("location", "", "pasture:location: expected an Azure region name"),
        ("resourceGroupName", "rg/with/slash", "pasture:resourceGroupName: expected"),
        ("resourceGroupName", "ends.", "pasture:resourceGroupName: expected"),
        ("resourceGroupName", "x" * 91, "pasture:resourceGroupName: expected"),
    ],
)
def test_azure_fields_are_checked_with_the_key_named(key, value, message):
    cfg = parse_config({"platform": "aks", key: value})
    with pytest.raises(ConfigError, match=re.escape(message)) as exc:
        check_config(cfg)
    assert repr(value)[:40].rstrip("'") in str(exc.value)


@pytest.mark.parametrize(
    "fields",
    [
        {"kubernetesVersion": "1.30"},
        {"kubernetesVersion": "1.34.2"},
        {"kubernetesVersion": ""},
        {"location": "eastus2", "resourceGroupName": "team-a_(gpu).rg"},
    ],
)
def test_good_azure_fields_pass(fields):
    check_config(parse_config({"platform": "aks", **fields}))
