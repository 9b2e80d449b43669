"""Azure names of the aks stack, explicit and within Azure's rules for every
``clusterName`` the config accepts (letters, digits, '-', <= 32 chars), and the checks of
the Azure config fields (:func:`check_config`).

    storage account     3-24 chars, lower-case letters and digits, globally unique
    container registry  5-50 chars, letters and digits, globally unique
    node resource group 1-80 chars (AKS' own limit, not the 90 of other groups), unique
                        in the subscription: ``MC_<clusterName>_<hash>_<location>``, set
                        explicitly (``nodeResourceGroup``); AKS' default
                        ``MC_<group>_<cluster>_<location>`` of auto-named resources
                        overflows 80 for a ``clusterName`` over about 21 characters
    resource group      1-90 chars of letters, digits, '_', '-', '.', '(' and ')', not
                        ending in '.' (config ``resourceGroupName``, else auto-named)
    managed cluster     1-63 chars (auto-named ``<clusterName>-aks<8 random>``: <= 44)
    DNS prefix          1-54 chars, letters, digits, '-', alphanumeric ends (``clusterName``)

The globally unique names end in 8 hex characters of a hash of
``<subscription id>/<project>/<stack>/<clusterName>``: stable across updates of one stack
(no random state to keep), different for everyone else who deploys the same sample stack
(the subscription differs), and never longer than the limit, unlike azure-native's
auto-naming, which appends 8 random characters to the resource name (24 + 8 > 24).
Rules: https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules
and https://learn.microsoft.com/azure/aks/faq (node resource group).
"""

from __future__ import annotations

import hashlib
import re

from stacks.config import NAMESPACE, ConfigError, StackConfig

STORAGE_ACCOUNT = (3, 24)
REGISTRY = (5, 50)
NODE_RESOURCE_GROUP_MAX = 80
RESOURCE_GROUP_MAX = 90
MIN_KUBERNETES = (1, 30)
"""Oldest Kubernetes version the stack supports: node credentials use bound service
account tokens with the node name in them (1.30) and the fence sidecar native sidecars."""
_HASH_CHARS = 8
_RESOURCE_GROUP = re.compile(r"^[-\w._()]{1,90}$")
_LOCATION = re.compile(r"^[a-z][a-z0-9]{2,39}$")
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def _alnum(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _suffix(cluster_name: str, scope: str) -> str:
    return hashlib.sha256(f"{scope}/{cluster_name}".encode()).hexdigest()[:_HASH_CHARS]


def _fit(cluster_name: str, scope: str, infix: str, limits: tuple[int, int]) -> str:
    # len(infix) >= 2, so the name has 10 to ``high`` characters (every low bound is < 10).
    head = (_alnum(cluster_name) + infix)[: limits[1] - _HASH_CHARS]
    return head + _suffix(cluster_name, scope)


def storage_account_name(cluster_name: str, scope: str) -> str:
    """Storage account name: ``<cluster alnum><'st'>`` cut to 16 chars + 8 hex chars of
    ``sha256(scope/cluster_name)`` (3-24 lower-case letters and digits).

    Args:
        cluster_name: config ``clusterName``.
        scope: what makes the name differ between deployments:
            ``<subscription id>/<project>/<stack>``.
    """
    return _fit(cluster_name, scope, "st", STORAGE_ACCOUNT)


def registry_name(cluster_name: str, scope: str) -> str:
    """Container registry name: ``<cluster alnum>acr`` cut to 42 chars + 8 hex chars of
    ``sha256(scope/cluster_name)`` (5-50 letters and digits)."""
    return _fit(cluster_name, scope, "acr", REGISTRY)


def node_resource_group_name(cluster_name: str, scope: str, location: str) -> str:
    """The AKS node resource group: ``MC_<clusterName>_<8 hex of the scope hash>_<location>``
    (at most 3 + 32 + 1 + 8 + 1 + 40 = 85 for the longest names; cut to 80 by shortening
    the location part, which only makes it readable)."""
    name = f"MC_{cluster_name}_{_suffix(cluster_name, scope)}_{location}"
    return name[:NODE_RESOURCE_GROUP_MAX].rstrip("_-.")


def kubernetes_version(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a ``kubernetesVersion`` like ``1.30`` or ``1.30.4``; None when
    it is not in that form."""
    m = _VERSION.match(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_config(cfg: StackConfig) -> None:
    """Check the Azure fields of an aks config before any resource is declared.

    Raises:
        ConfigError: ``pasture:<key>: <expected>, given <value>`` for ``location`` (an
            Azure region name such as ``westeurope``), ``resourceGroupName`` (Azure's
            resource group rules), ``kubernetesVersion`` (``<major>.<minor>[.<patch>]``,
            at least 1.30, or empty for AKS' default).
    """
    problems = []
    if not _LOCATION.match(cfg.location):
        problems.append(
            f"{NAMESPACE}:location: expected an Azure region name (lower-case letters and "
            f"digits, like 'westeurope' or 'eastus2'), given {cfg.location!r}"
        )
    rg = cfg.resource_group_name
    if rg and (not _RESOURCE_GROUP.match(rg) or rg.endswith(".")):
        problems.append(
            f"{NAMESPACE}:resourceGroupName: expected 1-{RESOURCE_GROUP_MAX} letters, "
            f"digits, '_', '-', '.', '(' or ')', not ending in '.', given {rg!r}"
        )
    if cfg.kubernetes_version:
        version = kubernetes_version(cfg.kubernetes_version)
        if version is None or version < MIN_KUBERNETES:
            problems.append(
                f"{NAMESPACE}:kubernetesVersion: expected <major>.<minor>[.<patch>] of at "
                f"least {MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]} (or empty for AKS' default), "
                f"given {cfg.kubernetes_version!r}"
            )
    if problems:
        raise ConfigError("; ".join(problems))
