"""Turn what the store returns (its record dataclasses, pydantic models, dicts) into the
JSON data the API's response models validate (``scheduler/api/schemas.py``)."""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Mapping
from typing import Any

from scheduler.jobref import short_name


def as_dict(obj: object) -> Any:
    """A JSON-ready copy of ``obj``: dicts, lists, str, int, float, bool, None.

    Pydantic models go through ``model_dump(mode="json")``, dataclasses field by field,
    enums to their value, tuples/sets to lists. A job record answers its short ``name``
    (its name within its VC) and its ``key`` (:mod:`scheduler.jobref`). The result is
    decoded-JSON-shaped data (``Any`` as ``json.loads`` returns it); the route's response
    model validates it.
    """
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: as_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        # the store's JobRecord; not imported here: the CLI loads this module without Redis
        # (a record exists only once the store's module is loaded)
        records = sys.modules.get("scheduler.store.records")
        if records is not None and isinstance(obj, records.JobRecord):
            out["key"], out["name"] = obj.name, short_name(obj.name)
        return out
    if isinstance(obj, Mapping):
        return {str(as_dict(k)): as_dict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [as_dict(v) for v in obj]
    return str(obj)


def spec_gpus(spec: Mapping[str, Any]) -> int:
    """GPUs a pasture-format job spec (the dict a job stores, ``JobOut.spec``) asks for:
    the sum over its roles of replicas x GPUs per task. A spec without roles asks for 0.
    The one definition the dashboard and the CLI share (stdlib only, cheap to import)."""
    roles = spec.get("roles") or {}
    total = 0
    for role in roles.values() if isinstance(roles, Mapping) else ():
        resources = role.get("resources") or {}
        total += int(role.get("replicas") or 1) * int(resources.get("gpu") or 0)
    return total
