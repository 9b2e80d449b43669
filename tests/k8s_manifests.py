"""Kubernetes objects as the API server would receive them, and their validation.

``manifest(resource)`` turns a pulumi-kubernetes resource recorded by the mocks (type
``kubernetes:apps/v1:DaemonSet``, inputs with wire names) into the object sent to the API
(apiVersion, kind, fields; Pulumi's secret wrappers removed, integral floats back to int).
``validate(obj)`` checks it with kubernetes-validate (the OpenAPI JSON schemas of each
Kubernetes release, strict: unknown fields are errors) for every release in
:data:`VERSIONS`, plus the rules the schemas cannot express that the API server enforces
(an ``In``/``NotIn`` node selector needs values).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate

VERSIONS = ("1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0")
SECRET_SIG = "4dabf18193072939515e22adb298388d"  # pulumi's secret marker on the wire


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return _plain(value["value"])
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def manifest(resource: Any) -> dict[str, Any]:
    """The object of a recorded ``kubernetes:<group>/<version>:<Kind>`` resource."""
    _, group_version, kind = resource.typ.split(":")
    group, version = group_version.split("/")
    api_version = version if group == "core" else f"{group}/{version}"
    if group == "rbac":
        api_version = f"rbac.authorization.k8s.io/{version}"
    return {"apiVersion": api_version, "kind": kind, **_plain(dict(resource.inputs))}


def _empty_selectors(obj: Any, path: str = "") -> list[str]:
    found = []
    if isinstance(obj, dict):
        if obj.get("operator") in ("In", "NotIn") and not obj.get("values"):
            found.append(path)
        for k, v in obj.items():
            found += _empty_selectors(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += _empty_selectors(v, f"{path}[{i}]")
    return found


def validate(obj: dict[str, Any]) -> None:
    """Raise AssertionError naming the object, release and path of the first problem."""
    name = f"{obj['kind']}/{obj.get('metadata', {}).get('name')}"
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            raise AssertionError(f"{name} invalid on {version}: {where}: {exc.message}") from None
    empty = _empty_selectors(obj)
    assert not empty, f"{name}: In/NotIn with no values at {empty} (the API server refuses it)"
