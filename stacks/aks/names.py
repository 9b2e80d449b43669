"""Azure names of the aks stack's globally named resources, explicit and within Azure's
rules for every ``clusterName`` the config accepts (letters, digits, '-', <= 32 chars).

    storage account  3-24 chars, lower-case letters and digits, globally unique
    container registry 5-50 chars, letters and digits, globally unique

Each name is the cluster name without dashes, cut to fit, plus 8 hex characters of a hash
of ``<project>/<stack>/<clusterName>``: stable across runs of one stack, different between
stacks (Azure's names are global), and never longer than the limit, unlike azure-native's
auto-naming, which appends 8 random characters to the resource name (24 + 8 > 24).
Rules: https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules
"""

from __future__ import annotations

import hashlib
import re

STORAGE_ACCOUNT = (3, 24)
REGISTRY = (5, 50)
_HASH_CHARS = 8


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
        scope: what makes the name differ between stacks (``<project>/<stack>``).
    """
    return _fit(cluster_name, scope, "st", STORAGE_ACCOUNT)


def registry_name(cluster_name: str, scope: str) -> str:
    """Container registry name: ``<cluster alnum>acr`` cut to 42 chars + 8 hex chars of
    ``sha256(scope/cluster_name)`` (5-50 letters and digits)."""
    return _fit(cluster_name, scope, "acr", REGISTRY)
